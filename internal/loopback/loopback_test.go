package loopback

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
)

// The picked ports are distinct, free, and never ones the kernel hands
// out to a listener on port 0 or an outgoing connection.
func TestPortsLieOutsideTheEphemeralRange(t *testing.T) {
	lo, hi, ok := freeRange()
	if !ok {
		t.Skip("no ephemeral range to read on this system")
	}
	// The kernel's range, read here on its own: the stretch picked from
	// must not overlap it.
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		t.Fatal(err)
	}
	var elo, ehi int
	if _, err := fmt.Sscan(string(b), &elo, &ehi); err != nil {
		t.Fatalf("%s: %q: %v", rangeFile, b, err)
	}
	addrs, err := Ports(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s picked twice in %v", a, addrs)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < lo || port > hi {
			t.Fatalf("port %d outside the picked stretch %d-%d", port, lo, hi)
		}
		if port >= elo && port <= ehi {
			t.Fatalf("port %d inside the kernel's ephemeral range %d-%d", port, elo, ehi)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("a picked port is not free: %v", err)
		}
		ln.Close()
	}
	// The kernel's own picks never land on them.
	for range 200 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if seen[ln.Addr().String()] {
			t.Fatalf("the kernel handed out picked port %s", ln.Addr())
		}
		ln.Close()
	}
}

func TestPortsRefusesWhatItCannotFind(t *testing.T) {
	if _, _, ok := freeRange(); !ok {
		t.Skip("no ephemeral range to read on this system")
	}
	if _, err := Ports(1 << 17); !errors.Is(err, ErrNoPorts) {
		t.Fatalf("more ports than exist: %v, want ErrNoPorts", err)
	}
}
