package cluster

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePort_IsBindableAndBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port >= low || port < 10000 {
			t.Fatalf("FreePort() = %d; want a port in [10000, %d), where no outgoing connection's source port can take it", port, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("FreePort() = %d, but it cannot be bound: %v", port, err)
		}
		l.Close()
	}
}
