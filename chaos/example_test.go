package chaos_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jingwei/jingwei/chaos"
)

// A quick single-node run with the jingwei binary at ./bin/jingwei: the
// report is printed, and its Err says whether every must-hold invariant
// held. (Not run by go test: a run takes about a minute.)
func ExampleRun() {
	rep, err := chaos.Run(context.Background(), chaos.Config{Exe: "./bin/jingwei", Mode: chaos.ModeSingle, Quick: true, Seed: 12})
	if err != nil {
		fmt.Println("the run could not complete:", err)
		return
	}
	_ = rep.WriteTable(os.Stdout)
	if err := rep.Err(); err != nil {
		fmt.Println(err)
	}
}
