//go:build !race

package toolworker_test

// floodFactor is how many times its median before the flood a calm
// session's median call may take under it.
const floodFactor = 10
