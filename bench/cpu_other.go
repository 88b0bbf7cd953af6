//go:build !unix

package bench

import "time"

// processCPU is not measured here: -1 (the rows that use it show NaN).
func processCPU() time.Duration { return -1 }
