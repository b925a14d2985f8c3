// Package loopback picks loopback ports for listeners that must be named
// before they are bound, and bound again after a restart: a cluster
// node's port, which its peers know from their configuration.
//
// A port found free by listening on 127.0.0.1:0 and closing again comes
// from the kernel's ephemeral range, the range it also hands to every
// other listener on port 0 and to every outgoing connection; between the
// pick and the bind, or while a node is down, one of those can take it,
// and the node then fails with "address already in use". Ports picks
// below that range (or above it where there is no room below), where the
// kernel never hands a port out on its own.
package loopback

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// rangeFile holds the kernel's ephemeral port range, "low high".
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// floor is the lowest port Ports picks: below it lie the ports that
// well-known and registered services listen on.
const floor = 10000

// ErrNoPorts reports that no free ports were found outside the
// ephemeral range.
var ErrNoPorts = errors.New("loopback: no free ports outside the ephemeral range")

// Ports returns n distinct 127.0.0.1 addresses, each free when Ports
// returns and outside the kernel's ephemeral port range, chosen at
// random so that harnesses running side by side seldom pick the same.
// Where the range cannot be read (not Linux), it falls back to ports the
// kernel picks.
func Ports(n int) ([]string, error) {
	lns, err := Listeners(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(lns))
	for i, ln := range lns {
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	return addrs, nil
}

// Listeners is Ports with the ports kept open: n listeners, for a node
// started in this process, whose address it can bind again after a
// restart.
func Listeners(n int) ([]net.Listener, error) {
	lo, hi, ok := freeRange()
	if !ok {
		return kernelListeners(n)
	}
	if n > (hi-lo+1)/2 {
		return nil, fmt.Errorf("%w: %d asked of %d-%d", ErrNoPorts, n, lo, hi)
	}
	lns := make([]net.Listener, 0, n)
	for tries := 0; len(lns) < n && tries < 100*n; tries++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo+1))))
		if err != nil {
			continue // taken, or held by this call already
		}
		lns = append(lns, ln)
	}
	if len(lns) < n {
		closeAll(lns)
		return nil, fmt.Errorf("%w: found %d of %d in %d-%d", ErrNoPorts, len(lns), n, lo, hi)
	}
	return lns, nil
}

// freeRange is the larger stretch of ports, from floor up, that lies
// outside the ephemeral range.
func freeRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	elo, err1 := strconv.Atoi(f[0])
	ehi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || elo > ehi {
		return 0, 0, false
	}
	below, above := elo-floor, 65535-ehi
	switch {
	case below >= above && below >= 1000:
		return floor, elo - 1, true
	case above >= 1000:
		return ehi + 1, 65535, true
	}
	return 0, 0, false
}

// kernelListeners lets the kernel pick.
func kernelListeners(n int) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("loopback: pick a port: %w", err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}
