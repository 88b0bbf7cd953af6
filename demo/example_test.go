package demo_test

import (
	"fmt"

	"github.com/jingwei/jingwei/demo"
)

// The demo's tool worker is told where each held tool body stops: before its
// side effect or after it.
func ExampleParseHolds() {
	holds, err := demo.ParseHolds("payments.charge=before,orders.create=after")
	if err != nil {
		panic(err)
	}
	fmt.Println(holds["orders.create"], holds["payments.charge"])
	fmt.Println(demo.FormatHolds(holds))
	// Output:
	// after before
	// orders.create=after,payments.charge=before
}
