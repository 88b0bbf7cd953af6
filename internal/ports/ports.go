// Package ports picks loopback TCP ports for processes that must be told
// their port before they start (the nodes of a cluster, whose routes name
// each other).
//
// A port taken from the kernel with a listen on port 0 is free only while
// that listener lives: once it is closed, the next listen on port 0 in any
// process, or the source port of any outgoing connection, can be given the
// same number, and the node that was meant to bind it then finds it in use.
// The chaos harness hit exactly that (a node restarted for two minutes on
// "address in use" while the harness's own proxies and clients held ephemeral
// ports). Free therefore picks ports below the kernel's ephemeral range,
// which neither listens on port 0 nor outgoing connections are ever given,
// and checks each by binding it.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor is the lowest port Free picks: below it sit well-known and
// registered services.
const floor = 10000

// defaultEphemeral is Linux's default ephemeral range, assumed where the
// range cannot be read.
var defaultEphemeral = [2]int{32768, 60999}

// rangeFile is where Linux keeps the ephemeral range.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Free returns n distinct TCP ports on 127.0.0.1, each free when checked
// and outside the ephemeral range, so no other socket is handed one of them
// by the kernel before the caller's process binds it. Another process
// choosing ports the same way may still pick one (a chance of about one in
// the size of the range per port).
func Free(n int) ([]int, error) {
	lo, hi := pickRange(ephemeral())
	if hi-lo < 4*n {
		return nil, fmt.Errorf("ports: only %d ports outside the ephemeral range, need %d", hi-lo, n)
	}
	out := make([]int, 0, n)
	seen := map[int]bool{}
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("ports: found %d free ports of %d in [%d, %d) after %d tries", len(out), n, lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		out = append(out, p)
	}
	return out, nil
}

// ephemeral is the kernel's ephemeral port range [lo, hi].
func ephemeral() (lo, hi int) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return defaultEphemeral[0], defaultEphemeral[1]
	}
	lo, hi, err = parseRange(string(b))
	if err != nil {
		return defaultEphemeral[0], defaultEphemeral[1]
	}
	return lo, hi
}

// parseRange reads "lo\thi\n".
func parseRange(s string) (lo, hi int, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, errors.New("ports: want two numbers")
	}
	if lo, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, err
	}
	if hi, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	if lo < 1 || hi > 65535 || lo > hi {
		return 0, 0, fmt.Errorf("ports: bad range %d-%d", lo, hi)
	}
	return lo, hi, nil
}

// pickRange is the half-open range Free draws from, given the ephemeral
// range [elo, ehi]: the larger of the gaps below and above it.
func pickRange(elo, ehi int) (lo, hi int) {
	below := [2]int{floor, elo}
	above := [2]int{ehi + 1, 65536}
	if below[1]-below[0] >= above[1]-above[0] {
		return below[0], max(below[0], below[1])
	}
	return max(floor, above[0]), above[1]
}
