package streamtest

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// FreezeProxy forwards TCP connections to a NATS server and can stop
// forwarding in both directions while the sockets stay open (the bytes
// wait): to the server, a client behind it looks like a process frozen
// with SIGSTOP — nothing it sends arrives, nothing is read — and to the
// client the server looks like a cut-off node, gone without a disconnect,
// until Thaw.
type FreezeProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	thawed chan struct{} // nil: not frozen
	conns  []net.Conn    // both ends of every forwarded connection
}

// NewFreezeProxy listens on a loopback port and forwards every connection
// to serverURL (nats://host:port or host:port). It is closed, and thawed,
// by t.Cleanup.
func NewFreezeProxy(t testing.TB, serverURL string) *FreezeProxy {
	t.Helper()
	target := strings.TrimPrefix(serverURL, "nats://")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FreezeProxy{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); p.Thaw() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(s, c)
			go p.pipe(c, s)
		}
	}()
	return p
}

// URL is the proxy's nats:// URL, for a client to connect through it.
func (p *FreezeProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Freeze holds every byte from now on, both ways.
func (p *FreezeProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed == nil {
		p.thawed = make(chan struct{})
	}
}

// Thaw forwards again, the held bytes first.
func (p *FreezeProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
}

// Cut closes every connection forwarded so far, both ends, and thaws: the
// bytes held since Freeze are lost (a node cut off whose writes never
// reached the others, as a client sees it: its connection drops and what
// it had sent is gone). A client that reconnects gets a new connection
// through the proxy, forwarded at once.
func (p *FreezeProxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.Thaw()
}

func (p *FreezeProxy) wait() {
	p.mu.Lock()
	ch := p.thawed
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (p *FreezeProxy) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
