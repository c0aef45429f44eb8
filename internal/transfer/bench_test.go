package transfer_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/transfer"
)

// emptyHead is a Backend and HeadSource with nothing to hand over: a Pull
// to it is a bare round trip.
type emptyHead struct{}

func (emptyHead) ServeTransferred(http.ResponseWriter, *http.Request, transfer.Inbound) error {
	return nil
}

func (emptyHead) HandHead(string, uint64) (string, bool) { return "", false }

// pingBytes is about the size of a marshalled PullRequest or PullResponse.
const pingBytes = 24

// benchLimit bounds one benchmark run: a lost datagram or a stuck peer
// fails it instead of hanging it.
const benchLimit = 2 * time.Minute

// BenchmarkPullRoundTrip times one Transfer.Pull on loopback (ns/op is the
// round trip a steal pull waits before its request can come), beside the
// same exchange of pingBytes as raw bytes on one TCP connection and as UDP
// datagrams: what gRPC adds over the sockets. Client and server share this
// process, so the figures are a floor for two processes on a busy machine
// (docs/measurements/steal-deadtime.txt has the cluster's). make bench
// runs it; under busy loops (bash scripts/under-load.sh -n 2 go test ...)
// it shows a contended machine.
func BenchmarkPullRoundTrip(b *testing.B) {
	b.Run("grpc", func(b *testing.B) {
		addr, _ := startServer(b, emptyHead{}, members{"node-a": true})
		c := newClient(b)
		ctx, cancel := context.WithTimeout(context.Background(), benchLimit)
		defer cancel()
		_, err := c.Pull(ctx, addr, "node-a", 1) // connect outside the timing
		require.NoError(b, err)
		b.ResetTimer()
		for i := range b.N {
			if _, err := c.Pull(ctx, addr, "node-a", uint64(i+2)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tcp", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		defer ln.Close()
		go echo(ln)
		conn, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(b, err)
		defer conn.Close()
		pingPong(b, conn)
	})
	b.Run("udp", func(b *testing.B) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(b, err)
		defer pc.Close()
		go func() {
			buf := make([]byte, pingBytes)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if _, err := pc.WriteTo(buf[:n], from); err != nil {
					return
				}
			}
		}()
		conn, err := net.Dial("udp", pc.LocalAddr().String())
		require.NoError(b, err)
		defer conn.Close()
		pingPong(b, conn)
	})
}

// echo answers every pingBytes read on each connection ln accepts.
func echo(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			buf := make([]byte, pingBytes)
			for {
				if _, err := io.ReadFull(conn, buf); err != nil {
					return
				}
				if _, err := conn.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// pingPong times b.N exchanges of pingBytes on conn.
func pingPong(b *testing.B, conn net.Conn) {
	require.NoError(b, conn.SetDeadline(time.Now().Add(benchLimit)))
	buf := make([]byte, pingBytes)
	b.ResetTimer()
	for range b.N {
		if err := ping(conn, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// ping writes buf on conn and reads as many bytes back into it.
func ping(conn net.Conn, buf []byte) error {
	if _, err := conn.Write(buf); err != nil {
		return err
	}
	_, err := io.ReadFull(conn, buf)
	return err
}
