package sessionlog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jingwei/jingwei/schema"
)

func TestSourceCheck(t *testing.T) {
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Source{}, "--history or --session is required"},
		{Source{File: "f", Session: "s"}, "not both"},
		{Source{Session: "a b"}, "invalid session id"},
		{Source{Session: "s-1"}, ""},
		{Source{File: "f"}, ""},
	} {
		if got := tc.src.Check(); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: Check = %q, want %q", tc.src, got, tc.want)
		}
	}
}

// TestSourceOpen reports a file that cannot be opened at once, and a
// server that cannot be read through the history.
func TestSourceOpen(t *testing.T) {
	if _, _, err := (Source{File: t.TempDir()}).Open(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v", err)
	}
	down := errors.New("no server")
	h, done, err := (Source{Session: "s-1"}).Open(context.Background(), func(context.Context, string) ([]schema.Event, error) { return nil, down })
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	for _, err := range h {
		if !errors.Is(err, down) {
			t.Errorf("history yields %v, want the load error", err)
		}
	}
}
