package fibrildproc

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestStartKillRestartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs fibrild")
	}
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "fibrild")
	if err := Build(ctx, "../../tools/fibrild", bin, ""); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	p, err := Start(ctx, Options{Bin: bin, DataDir: data, Args: []string{"--storage.min_free", "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr == "" || p.Admin == "" {
		t.Fatalf("addresses not read: %q %q", p.Addr, p.Admin)
	}
	u, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.RSS <= 0 || u.PeakRSS < u.RSS {
		t.Fatalf("usage %+v", u)
	}
	p.Kill()
	if p.ExitErr() == nil {
		t.Fatal("a SIGKILLed process reported a clean exit")
	}
	addr := p.Addr // restarted where it was, as the harnesses do
	p, err = Start(ctx, Options{Bin: bin, DataDir: data, Listen: addr, Args: []string{"--storage.min_free", "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr != addr {
		t.Fatalf("restarted on %s, not %s", p.Addr, addr)
	}
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM exit: %v\n%s", err, p.Log())
	}
	if _, err := Start(ctx, Options{Bin: bin, DataDir: data, Args: []string{"--no-such-flag"}}); !errors.Is(err, ErrExited) {
		t.Fatalf("bad flag: %v, want ErrExited", err)
	}
}
