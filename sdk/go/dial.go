package spanprof

import (
	"context"
	"net"
)

// DialFunc is the signature of net.Dialer.DialContext and of
// http.Transport.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// DetachDial wraps dial so that the connections it opens carry no span.
// Use it as an http.Transport's DialContext:
//
//	t := http.DefaultTransport.(*http.Transport).Clone()
//	t.DialContext = spanprof.DetachDial((&net.Dialer{}).DialContext)
//
// The Go runtime gives a new goroutine the labels of the goroutine that
// starts it. net/http dials on a goroutine it starts from the request's,
// and the connection's reader and writer goroutines start from that one:
// without this, they carry the span of the request that opened the
// connection for as long as the connection lives, parked in the network
// poller, and a profiler charges their waits (and, over a kept-alive
// connection, those of later requests) to that span. DetachDial clears the
// labels of the dialing goroutine before dialing; the request's own
// goroutine keeps its span and its wait for the response.
//
// Call it only from a goroutine that exists to dial (net/http's is): it
// clears the labels of the goroutine it runs on.
func DetachDial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		setProfLabel(nil)
		return dial(ctx, network, addr)
	}
}
