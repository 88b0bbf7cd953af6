package recovery

// CollideHashes makes every id and key hash of later scans equal, so
// that the duplicate checks rest on comparing calls alone; restore undoes
// it. Not for parallel tests.
func CollideHashes() (restore func()) {
	old := hashString
	hashString = func(string) uint64 { return 0 }
	return func() { hashString = old }
}
