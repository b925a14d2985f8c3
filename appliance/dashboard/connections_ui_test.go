package dashboard

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/server"
)

// TestConnectionsAndConsumersInBrowser: two Go clients, named, against a
// real wire server; the Connections page lists each with its name,
// address and publishes, and the Consumers page the subscription with its
// queue, prefetch, what it holds unsettled and its settles, as GET
// /api/connections reports them.
func TestConnectionsAndConsumersInBrowser(t *testing.T) {
	var srv *server.Server
	base, _, _, b := startNodeBroker(t, admin.Options{Sessions: func() any { return srv.Sessions() }}, nil, appliance.Options{})
	srv, err := server.New(b, server.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	ctx := t.Context()
	pub, err := client.Dial(ctx, ln.Addr().String(), client.Options{ClientName: "sensor-gateway"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if _, err := pub.DeclareQueue(ctx, client.Queue("readings").Durable()); err != nil {
		t.Fatal(err)
	}
	for range 4 { // as many as the prefetch: none follows the ack below
		if _, err := pub.Publish(ctx, "readings", client.Message{Body: []byte("21.5")}); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := client.Dial(ctx, ln.Addr().String(), client.Options{ClientName: "historian"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	cons, err := sub.Consume(ctx, "readings", 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // ack one of the first four: three stay unsettled
		d := <-cons.Messages()
		if i == 0 {
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		}
	}

	br := startBrowser(t, 1280, 900)
	conns := `main[data-page="connections"] `
	br.Do(t, "open the connections page", chromedp.Navigate(base+"/#/connections"),
		chromedp.WaitVisible(chromedp.CSS(conns+`tr[data-connection] td[data-field="client"]`)))
	br.WaitFor(t, "both clients listed", `[...document.querySelectorAll('`+conns+`td[data-field="client"]')].map(e => e.textContent).sort().join(',') === 'historian,sensor-gateway'`,
		`[...document.querySelectorAll('`+conns+`td[data-field="client"]')].map(e => e.textContent).join(',')`)
	br.WaitFor(t, "the gateway's publishes", `[...document.querySelectorAll('`+conns+`tr')].some(r => r.textContent.includes('sensor-gateway') && r.querySelector('td[data-field="published"]').textContent === '4')`,
		textOf(conns+`tbody`))

	row := `main[data-page="consumers"] tr[data-queue="readings"] `
	br.Do(t, "open the consumers page", chromedp.Navigate(base+"/#/consumers"), chromedp.WaitVisible(chromedp.CSS(row+`td[data-field="unsettled"]`)))
	br.WaitFor(t, "three unsettled of the prefetch", number(row+`td[data-field="unsettled"]`)+` === 3`, textOf(row+`td[data-field="unsettled"]`))
	for field, want := range map[string]string{"client": "historian", "prefetch": "4", "delivered": "4", "acked": "1", "state": "flowing"} {
		if got := br.Text(t, row+`td[data-field="`+field+`"]`); !strings.Contains(got, want) {
			t.Errorf("consumer's %s says %q, want %q", field, got, want)
		}
	}
	br.Screenshot(t, "dashboard-consumers.png")
	br.Do(t, "a 375 px screen", chromedp.EmulateViewport(375, 812), chromedp.Navigate(base+"/#/connections"),
		chromedp.WaitVisible(chromedp.CSS(conns+`tr[data-connection]`)))
	br.WaitFor(t, "no horizontal overflow at 375 px", `document.documentElement.scrollWidth <= window.innerWidth`,
		`'scrollWidth ' + document.documentElement.scrollWidth + ' innerWidth ' + window.innerWidth`)
	br.CheckNoExceptions(t)
}
