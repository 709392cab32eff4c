#!/bin/sh
# Builds Slurm's container path as the two Debian packages a site puts on its artifact mirror (slurm.containers in
# the site spec; docs/gpu-driver.md says why packages, and why built here):
#   enroot_<version>_amd64.deb                 enroot, with glibc instead of upstream's static musl build
#   nvslurm-plugin-pyxis_<version>_amd64.deb   Pyxis, against this machine's Slurm headers (libslurm-dev)
# and SHA256SUMS beside them. Usage: slurm-containers.sh SOURCES_DIR OUT_DIR
# SOURCES_DIR holds the upstream archives ../shared/sources/SOURCES.md lists; the build follows
# ../shared/notes/pyxis-enroot-build.md. Needs: gcc make libslurm-dev libbsd-dev makeself dpkg-dev.
set -eu
# Timestamps in the packages come from here, not the clock, so two builds of the same sources with the same tools give
# the same bytes (reproducible-builds.org's SOURCE_DATE_EPOCH; dpkg-deb clamps every file's mtime to it).
export SOURCE_DATE_EPOCH=1735689600

ENROOT_ARCHIVE=enroot-4.1.2-8ea147d.tar.gz
ENROOT_VERSION=4.1.2-1
PYXIS_ARCHIVE=pyxis-0.24.0.tar.gz
PYXIS_VERSION=0.24.0-1

sources=$(realpath "$1")
out=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
arch=$(dpkg --print-architecture)

# A build step's output only when it fails (the compilers' warnings are upstream's).
quiet() {
    "$@" > "$work/step.log" 2>&1 || { cat "$work/step.log" >&2; echo "failed: $*" >&2; exit 1; }
}

# A package from a staged tree: control file, md5sums (what `dpkg --verify` checks on the host), files owned by root.
package() {
    stage=$1 name=$2 version=$3 depends=$4 description=$5
    mkdir -p "$stage/DEBIAN"
    (cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
        > "$stage/DEBIAN/md5sums"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: gpu-cluster platform team <root@localhost>"
        echo "Depends: $depends"
        echo "Section: admin"
        echo "Priority: optional"
        echo "Description: $description"
        echo " Built by gpu-cluster's packaging/slurm-containers.sh from the upstream source."
    } > "$stage/DEBIAN/control"
    dpkg-deb --root-owner-group -Zxz --build "$stage" "$out/${name}_${version}_${arch}.deb" >/dev/null
}

mkdir -p "$out"
rm -f "$out"/*.deb "$out/SHA256SUMS"

# enroot: its Makefile takes makeself, musl and the kernel headers from git submodules the archive lacks; built with
# glibc (FORCE_GLIBC), Debian's makeself and kernel headers, and Debian's static libbsd and libmd (glibc 2.36 has no
# strlcat). Installed as its own Debian package lays it out (pkg/deb/rules: prefix /usr, sysconfdir /etc).
tar -xzf "$sources/$ENROOT_ARCHIVE" -C "$work"
enroot=$work/enroot-4.1.2
mkdir -p "$enroot/deps/makeself" "$enroot/deps/dist/linux" "$enroot/deps/linux-headers"
cp /usr/bin/makeself "$enroot/deps/makeself/makeself.sh"
cp /usr/share/makeself/makeself-header.sh "$enroot/deps/makeself/"
ln -sfn /usr/include "$enroot/deps/dist/linux/include"
touch "$enroot/deps/linux-headers/.stamp"
libs="-L$enroot/deps/dist/libbsd -l:libbsd.a /usr/lib/x86_64-linux-gnu/libbsd.a /usr/lib/x86_64-linux-gnu/libmd.a"
# The paths are given to the build too: it writes them into the enroot script (@libdir@, @sysconfdir@).
layout="prefix=/usr sysconfdir=/etc"
quiet make -C "$enroot" $layout FORCE_GLIBC=y LDLIBS="$libs"
quiet make -C "$enroot" install DESTDIR="$work/enroot-stage" $layout FORCE_GLIBC=y LDLIBS="$libs"
# Upstream's Depends (pkg/deb/control); bsdmainutils is Debian 12's transitional package for column(1).
package "$work/enroot-stage" enroot "$ENROOT_VERSION" \
    "bash (>= 4.2), curl, gawk | mawk, jq (>= 1.5), parallel, passwd, squashfs-tools, zstd, bsdmainutils" \
    "Unprivileged container sandboxing utility"

# Pyxis: where its own Debian package puts the plugin (debian/rules: libdir=/usr/lib/$(DEB_HOST_MULTIARCH)). A SPANK
# plugin loads only into the Slurm release it was built for, so it depends on that release's client.
tar -xzf "$sources/$PYXIS_ARCHIVE" -C "$work"
# The build folder's name stays out of the plugin (its build ID hashes the debug paths), so builds compare.
export CFLAGS="-ffile-prefix-map=$work=/build"
quiet make -C "$work/pyxis-0.24.0"
unset CFLAGS
quiet make -C "$work/pyxis-0.24.0" install DESTDIR="$work/pyxis-stage" prefix=/usr \
    libdir="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" datarootdir=/usr/share
slurm=$(dpkg-query -W -f='${Version}' libslurm-dev | cut -d. -f1,2)
next="${slurm%.*}.$(printf '%02d' $((${slurm#*.} + 1)))"
package "$work/pyxis-stage" nvslurm-plugin-pyxis "$PYXIS_VERSION" \
    "enroot (>= 3.1.0), slurm-client (>= $slurm), slurm-client (<< $next)" \
    "Slurm plugin for launching containerized tasks"

(cd "$out" && sha256sum -- *.deb > SHA256SUMS)
cat "$out/SHA256SUMS"
