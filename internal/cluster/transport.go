package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// transport is memberlist's network transport (UDP datagrams, TCP streams
// on the same port), rewritten for a high datagram rate:
//
//   - memberlist.NetTransport allocates a fresh 64 KiB buffer for every
//     datagram it reads; at 20 ms gossip on 16 nodes that is ≈ 50 MB/s of
//     garbage per node and dominated the CPU profile. Here one read buffer is
//     reused and each datagram is copied into a buffer of its own size.
//   - Sends to IP-literal addresses parse into a netip.AddrPort without
//     allocating instead of going through net.ResolveUDPAddr.
//   - writeBatch sends one datagram to many members in one sendmmsg(2)
//     call (the direct mechanism's per-tick fan-out).
//   - A fast path hands SWD load messages (memberlist user messages with
//     SWD's magic) straight to the cluster from the reading goroutine,
//     skipping memberlist's two goroutine hand-offs. It is installed only
//     without a gossip key: with encryption every datagram must go through
//     memberlist's decryption and authentication.
//   - Every datagram sent is counted (Stats.PacketsSent, PacketBytesSent).
type transport struct {
	tcp      *net.TCPListener
	udp      *net.UDPConn
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	st       *counters
	log      *slog.Logger
	shutdown atomic.Bool
	done     chan struct{} // closed by Shutdown
	wg       sync.WaitGroup
	// fast, if set, is offered every datagram first; it returns true when
	// it consumed it. Read-only.
	fast func([]byte) bool
	// batch writes many datagrams per system call; msgs is its reusable
	// message array. Only the direct mechanism's gossip goroutine uses them.
	batch interface {
		WriteBatch(ms []ipv4.Message, flags int) (int, error)
	}
	msgs []ipv4.Message
	// faults, if set, drops sends to blocked addresses (tests only).
	faults *Faults
}

var _ memberlist.NodeAwareTransport = (*transport)(nil)

const (
	udpReadBufSize = 65536           // largest datagram
	udpSockBufSize = 2 * 1024 * 1024 // kernel receive buffer asked for
)

// newTransport binds ip:port, TCP and UDP on the same port. With port 0 the
// kernel picks a free TCP port and UDP binds the same number; a clash is
// retried up to 10 times.
func newTransport(ip net.IP, port int, fast func([]byte) bool, faults *Faults, st *counters, log *slog.Logger) (*transport, error) {
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var t *transport
		if t, err = listen(ip, port, fast, faults, st, log); err == nil {
			return t, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, err
}

func listen(ip net.IP, port int, fast func([]byte) bool, faults *Faults, st *counters, log *slog.Logger) (*transport, error) {
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("listen tcp: %w", err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		_ = tcp.Close()
		return nil, fmt.Errorf("listen udp: %w", err)
	}
	for size := udpSockBufSize; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	t := &transport{faults: faults,
		tcp: tcp, udp: udp,
		// Buffered, so that a burst of datagrams does not wait on
		// memberlist's reader goroutine one by one.
		packetCh: make(chan *memberlist.Packet, 256),
		streamCh: make(chan net.Conn),
		done:     make(chan struct{}),
		fast:     fast,
		st:       st,
		log:      log,
	}
	if ip.To4() != nil {
		t.batch = ipv4.NewPacketConn(udp)
	} else {
		t.batch = ipv6.NewPacketConn(udp)
	}
	t.wg.Add(2)
	go t.acceptLoop()
	go t.readLoop()
	return t, nil
}

// Port returns the bound port.
func (t *transport) Port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if port == 0 {
		port = t.Port()
	}
	if ip != "" {
		addr := net.ParseIP(ip)
		if addr == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		if v4 := addr.To4(); v4 != nil {
			addr = v4
		}
		return addr, port, nil
	}
	bound := t.tcp.Addr().(*net.TCPAddr).IP
	if !bound.IsUnspecified() {
		if v4 := bound.To4(); v4 != nil {
			bound = v4
		}
		return bound, port, nil
	}
	// Bound to every interface: advertise a private address, as memberlist
	// does.
	priv, err := sockaddr.GetPrivateIP()
	if err != nil {
		return nil, 0, fmt.Errorf("find a private address to advertise: %w", err)
	}
	addr := net.ParseIP(priv)
	if addr == nil {
		return nil, 0, errors.New("no private address to advertise; set the advertise address")
	}
	return addr, port, nil
}

// WriteTo implements memberlist.Transport.
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.faults.isBlocked(a.Addr) {
		return time.Now(), nil // lost on the way, as on a cut network
	}
	t.st.pktsSent.Add(1)
	t.st.pktBytesSent.Add(uint64(len(b)))
	if ap, err := netip.ParseAddrPort(a.Addr); err == nil {
		_, err = t.udp.WriteToUDPAddrPort(b, ap)
		return time.Now(), err
	}
	ua, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, ua)
	return time.Now(), err
}

// PacketCh implements memberlist.Transport.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.faults.isBlocked(a.Addr) {
		return nil, errBlocked
	}
	d := net.Dialer{Timeout: timeout}
	return d.Dial("tcp", a.Addr)
}

// StreamCh implements memberlist.Transport.
func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport: it closes the sockets and waits
// for the listener goroutines.
func (t *transport) Shutdown() error {
	if t.shutdown.Swap(true) {
		return nil
	}
	close(t.done)
	_ = t.tcp.Close()
	_ = t.udp.Close()
	t.wg.Wait()
	return nil
}

func (t *transport) acceptLoop() {
	defer t.wg.Done()
	delay := time.Duration(0)
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Debug("accept failed", "err", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		select {
		case t.streamCh <- conn:
		case <-t.done:
			_ = conn.Close()
			return
		}
	}
}

// writeBatch sends b to every address in to, with as few system calls as
// the kernel allows, and returns how many datagrams went out.
func (t *transport) writeBatch(b []byte, to []net.Addr) (int, error) {
	if t.faults != nil {
		kept := to[:0:0]
		for _, a := range to {
			if !t.faults.isBlocked(a.String()) {
				kept = append(kept, a)
			}
		}
		to = kept
	}
	if cap(t.msgs) < len(to) {
		t.msgs = make([]ipv4.Message, len(to))
	}
	ms := t.msgs[:len(to)]
	for i, a := range to {
		if len(ms[i].Buffers) != 1 {
			ms[i].Buffers = make([][]byte, 1)
		}
		ms[i].Buffers[0], ms[i].Addr = b, a
	}
	sent := 0
	var err error
	for sent < len(ms) {
		var n int
		n, err = t.batch.WriteBatch(ms[sent:], 0)
		if n <= 0 {
			break
		}
		sent += n
	}
	if sent < len(ms) { // the batch failed: send the rest one by one
		for _, m := range ms[sent:] {
			if _, e := t.udp.WriteTo(b, m.Addr); e == nil {
				sent++
			} else {
				err = e
			}
		}
	}
	for i := range ms {
		ms[i].Buffers[0], ms[i].Addr = nil, nil
	}
	t.st.pktsSent.Add(uint64(sent))
	t.st.pktBytesSent.Add(uint64(sent * len(b)))
	if sent == len(to) {
		err = nil
	}
	return sent, err
}

func (t *transport) readLoop() {
	defer t.wg.Done()
	buf := make([]byte, udpReadBufSize)
	for {
		n, ap, err := t.udp.ReadFromUDPAddrPort(buf)
		ts := time.Now()
		if err != nil {
			if t.shutdown.Load() {
				return
			}
			t.log.Debug("udp read failed", "err", err)
			continue
		}
		if n < 1 {
			continue
		}
		if t.fast != nil && t.fast(buf[:n]) {
			continue
		}
		addr := net.UDPAddrFromAddrPort(ap)
		pkt := &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: addr, Timestamp: ts}
		select {
		case t.packetCh <- pkt: // blocks while memberlist is behind, as NetTransport does
		case <-t.done:
			return
		}
	}
}

// memberlist's packet framing (its message types are part of its protocol
// and only ever appended to).
const (
	mlUserMsg   = 8  // userMsg: the rest is a delegate message
	mlHasCrcMsg = 12 // hasCrcMsg: 4-byte big-endian CRC-32 (IEEE) of the rest follows
)

// frameUserMsg appends payload framed as memberlist frames a user message to
// a peer speaking protocol version 5 (SendBestEffort without compression,
// encryption or label): CRC header, user message type, payload.
func frameUserMsg(dst, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, mlHasCrcMsg, 0, 0, 0, 0, mlUserMsg)
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[start+1:], crc32.ChecksumIEEE(dst[start+5:]))
	return dst
}

// unframeLoadMsg returns the SWD load message inside a memberlist datagram,
// or ok false when the datagram is anything else (left to memberlist).
// crcOK is false for a load message whose checksum does not match.
func unframeLoadMsg(pkt []byte) (msg []byte, crcOK, ok bool) {
	switch {
	case len(pkt) >= 8 && pkt[0] == mlHasCrcMsg && pkt[5] == mlUserMsg:
		msg = pkt[6:]
		if msg[0] != wireMagic[0] || msg[1] != wireMagic[1] {
			return nil, false, false
		}
		return msg, crc32.ChecksumIEEE(pkt[5:]) == binary.BigEndian.Uint32(pkt[1:5]), true
	case len(pkt) >= 3 && pkt[0] == mlUserMsg:
		msg = pkt[1:]
		if msg[0] != wireMagic[0] || msg[1] != wireMagic[1] {
			return nil, false, false
		}
		return msg, true, true
	}
	return nil, false, false
}
