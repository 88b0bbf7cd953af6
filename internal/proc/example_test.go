package proc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jingwei/jingwei/internal/proc"
)

func ExampleStart() {
	dir, _ := os.MkdirTemp("", "proc-example")
	defer os.RemoveAll(dir)
	c, err := proc.Start(proc.Config{Name: "greeter", Exe: "sh", Args: []string{"-c", "echo hello"},
		LogPath: filepath.Join(dir, "greeter.log")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Stop(5 * time.Second) // SIGTERM, then SIGKILL after 5 s; at once here, it has exited
	<-c.Done()
	fmt.Printf("err=%v log=%q\n", c.Err(), c.LogTail(100))
	// Output: err=<nil> log="hello\n"
}
