package effect

// AddKind appends an effect kind to the table for a test and returns it
// with a function that removes it again. It is the only way to add a kind
// other than a row in effect.go, and it exists in tests only: production
// code cannot add kinds at run time. Not for parallel tests.
func AddKind(name string, safe bool) (e Effect, remove func()) {
	wire = append(wire, name)
	_ = safe
	return Effect(len(wire) - 1), func() { wire = wire[:len(wire)-1] }
}
