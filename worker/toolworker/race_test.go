//go:build race

package toolworker_test

// floodFactor is how many times its median before the flood a calm
// session's median call may take under it: the race detector slows the
// flood's work (run on the same cores) several times more than a call.
const floodFactor = 40
