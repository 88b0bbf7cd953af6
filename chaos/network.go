package chaos

import (
	"fmt"
	"strings"

	"github.com/jingwei/jingwei/internal/ports"
)

// network is the loopback wiring of a chaos cluster: each node's client
// and route ports, a proxy for every ordered pair of nodes (node i dials
// node j's routes through proxy [i][j]), and the black hole every node
// advertises as its route address. Partition cuts a node's proxies both
// ways. The nodes themselves are processes started elsewhere.
type network struct {
	client  []int
	route   []int
	proxies [][]*proxy // [from][to]; nil on the diagonal
	hole    *blackhole
}

// newNetwork picks the ports of n nodes and starts the proxies (n = 1: one
// node, no proxies).
func newNetwork(n int) (*network, error) {
	ports, err := ports.Free(2 * n)
	if err != nil {
		return nil, err
	}
	w := &network{client: ports[:n], route: ports[n:], proxies: make([][]*proxy, n)}
	if n == 1 {
		return w, nil
	}
	if w.hole, err = newBlackhole(); err != nil {
		return nil, err
	}
	for i := range n {
		w.proxies[i] = make([]*proxy, n)
		for j := range n {
			if i == j {
				continue
			}
			if w.proxies[i][j], err = newProxy(fmt.Sprintf("127.0.0.1:%d", w.route[j])); err != nil {
				w.Close()
				return nil, err
			}
		}
	}
	return w, nil
}

// size is the number of nodes.
func (w *network) size() int { return len(w.client) }

func (w *network) clientURL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", w.client[i]) }

// URLs is every node's client URL, comma separated.
func (w *network) URLs() string {
	urls := make([]string, w.size())
	for i := range urls {
		urls[i] = w.clientURL(i)
	}
	return strings.Join(urls, ",")
}

// nodeConfig is node i's configuration on store dir with the role keys in
// auth.
func (w *network) nodeConfig(i int, dir, auth string) NodeConfig {
	cfg := NodeConfig{Name: fmt.Sprintf("n%d", i), Dir: dir, Listen: fmt.Sprintf("127.0.0.1:%d", w.client[i]), AuthDir: auth}
	if w.size() == 1 {
		return cfg
	}
	cfg.ClusterName = "jingwei-chaos"
	cfg.ClusterListen = fmt.Sprintf("127.0.0.1:%d", w.route[i])
	cfg.ClusterAdvertise = w.hole.Addr()
	for j, p := range w.proxies[i] {
		if j != i {
			cfg.Routes = append(cfg.Routes, "nats-route://"+p.Addr())
		}
	}
	return cfg
}

// Partition cuts node k from every other node: the proxies of its routes
// in both directions.
func (w *network) Partition(k int) {
	for j := range w.size() {
		if j == k {
			continue
		}
		w.proxies[k][j].Cut()
		w.proxies[j][k].Cut()
	}
}

// Heal lets every route through again.
func (w *network) Heal() {
	for i := range w.proxies {
		for j, p := range w.proxies[i] {
			if j != i && p != nil {
				p.Heal()
			}
		}
	}
}

// Close stops the proxies and the black hole.
func (w *network) Close() {
	for i := range w.proxies {
		for _, p := range w.proxies[i] {
			if p != nil {
				p.Close()
			}
		}
	}
	if w.hole != nil {
		w.hole.Close()
	}
}
