package bench

import (
	"context"
	"slices"
	"testing"
)

// TestRotate: every round runs each side once; over three rounds each of
// three sides goes first, second and third once, and over six rounds all
// six orders occur.
func TestRotate(t *testing.T) {
	var order []int
	side := func(s int) func(context.Context, int) (float64, error) {
		return func(_ context.Context, round int) (float64, error) {
			order = append(order, s)
			return float64(10*round + s), nil
		}
	}
	got, err := rotate(context.Background(), 6, side(0), side(1), side(2))
	if err != nil {
		t.Fatal(err)
	}
	for s, vs := range got {
		for round, v := range vs {
			if v != float64(10*round+s) {
				t.Fatalf("side %d round %d measured %v", s, round, v)
			}
		}
	}
	seen := map[string]bool{}
	for r := range 6 {
		o := order[3*r : 3*r+3]
		seen[string(rune('0'+o[0]))+string(rune('0'+o[1]))+string(rune('0'+o[2]))] = true
		if r < 3 {
			for pos := range 3 {
				col := []int{order[pos], order[3+pos], order[6+pos]}
				slices.Sort(col)
				if !slices.Equal(col, []int{0, 1, 2}) {
					t.Fatalf("position %d over the first three rounds: %v", pos, col)
				}
			}
		}
	}
	if len(seen) != 6 || !seen["012"] || order[0] != 0 {
		t.Fatalf("orders %v (%d distinct), want all six, round 0 as given", order, len(seen))
	}
}
