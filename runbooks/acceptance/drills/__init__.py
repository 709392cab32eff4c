"""One module per drill kind, each defining DRILL (runbooks.acceptance.registry.DrillType); the registry walks this
package, so a module here is a drill the spec may name, and needs its SOP under docs/sop/."""
