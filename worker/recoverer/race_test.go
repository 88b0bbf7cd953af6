//go:build race

package recoverer

const raceEnabled = true
