package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeAvoidsTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeral()
	got, err := Free(12)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range got {
		if p >= lo && p <= hi {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, lo, hi)
		}
		if p < floor || p > 65535 {
			t.Errorf("port %d outside [%d, 65535]", p, floor)
		}
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
	}
	if len(got) != 12 {
		t.Fatalf("got %d ports, want 12", len(got))
	}
}

// TestFreeIsNotHandedOutByTheKernel holds many kernel-chosen ports and
// checks none of them is one Free picks; the picked ports are bindable.
func TestFreeIsNotHandedOutByTheKernel(t *testing.T) {
	got, err := Free(6)
	if err != nil {
		t.Fatal(err)
	}
	mine := map[int]bool{}
	for _, p := range got {
		mine[p] = true
	}
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if p := l.Addr().(*net.TCPAddr).Port; mine[p] {
			t.Fatalf("the kernel handed out picked port %d", p)
		}
	}
	for _, p := range got {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("picked port %d: %v", p, err)
		}
		l.Close()
	}
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi int
		ok     bool
	}{
		{"32768\t60999\n", 32768, 60999, true},
		{"1024 65535", 1024, 65535, true},
		{"60999 32768", 0, 0, false},
		{"x 1", 0, 0, false},
		{"1", 0, 0, false},
		{"0 100", 0, 0, false},
	} {
		lo, hi, err := parseRange(c.in)
		if (err == nil) != c.ok || lo != c.lo || hi != c.hi {
			t.Errorf("parseRange(%q) = %d, %d, %v", c.in, lo, hi, err)
		}
	}
}

func TestPickRange(t *testing.T) {
	for _, c := range []struct{ elo, ehi, lo, hi int }{
		{32768, 60999, 10000, 32768},
		{49152, 65535, 10000, 49152},
		{1024, 40000, 40001, 65536},
	} {
		lo, hi := pickRange(c.elo, c.ehi)
		if lo != c.lo || hi != c.hi {
			t.Errorf("pickRange(%d, %d) = [%d, %d), want [%d, %d)", c.elo, c.ehi, lo, hi, c.lo, c.hi)
		}
	}
	// Nothing left outside the range: an empty range, which Free refuses.
	if lo, hi := pickRange(1024, 65535); hi > lo {
		t.Errorf("pickRange(1024, 65535) = [%d, %d), want empty", lo, hi)
	}
}
