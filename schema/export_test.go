package schema

// AddStatus and AddStage append a row to the status or stage table for a
// test and return a function that removes it again. They are the only way
// to add a value other than a row in types.go, and they exist in tests
// only: production code cannot add values at run time. Not for parallel
// tests.
func AddStatus(s Status) (remove func()) {
	statuses = append(statuses, s)
	return func() { statuses = statuses[:len(statuses)-1] }
}

// AddStage: see AddStatus.
func AddStage(s Stage) (remove func()) {
	stages = append(stages, s)
	return func() { stages = stages[:len(stages)-1] }
}
