package effect

// AddKind appends a row to the effect table for a test and returns its
// effect with a function that removes it again. It is the only way to add
// an effect other than a row in effect.go, and it exists in tests only:
// production code cannot add effects at run time. Not for parallel tests.
func AddKind(name string, safe bool) (e Effect, remove func()) {
	kinds = append(kinds, kind{name: name, safe: safe})
	return Effect(len(kinds) - 1), func() { kinds = kinds[:len(kinds)-1] }
}
