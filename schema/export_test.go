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

// AddEventType appends a row to the event type table for a test: events
// of type name carry the body that member names (an existing body: a new
// one is a new Event field), checked by check (nil: presence only). remove
// takes the row out again. Not for parallel tests.
func AddEventType[T any](name, member string, check func(v *T, session string) error) (remove func()) {
	i := bodyNamed([]byte(member))
	if i < 0 {
		panic("schema: no body " + member)
	}
	eventTypes = append(eventTypes, newType(name, i, check))
	return func() { eventTypes = eventTypes[:len(eventTypes)-1] }
}

// EventTypes returns the event type table as the names of the types in
// table order and, by type, the member that carries its body.
func EventTypes() (names []string, bodyOf map[string]string) {
	bodyOf = map[string]string{}
	for _, t := range eventTypes {
		names = append(names, t.name)
		bodyOf[t.name] = bodies[t.body].member
	}
	return names, bodyOf
}

// BodyMembers returns the envelope members that carry a body, in table
// order.
func BodyMembers() []string {
	var m []string
	for _, b := range bodies {
		m = append(m, b.member)
	}
	return m
}
