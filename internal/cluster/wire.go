package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Load message, version 2. All integers are unsigned varints unless noted.
//
//	magic    2 bytes  'S' 'L'
//	version  1 byte   2 (1 is still read: its entries end after age)
//	count    uvarint  number of entries, 1..maxEntries
//	entries  count ×:
//	  name      uvarint length (1..128) + bytes
//	  boot      8 bytes little-endian: the sender process's boot ID
//	  seq       uvarint  per-boot sequence number, increasing
//	  load      uvarint  waiting + in service
//	  m         uvarint  concurrency
//	  policy    uvarint length (0..64) + bytes
//	  epoch     varint (zig-zag)
//	  interval  uvarint  activation interval in nanoseconds
//	  age       uvarint  microseconds the entry had aged when sent (0 for
//	                     the sender's own entry; relays add their holding time)
//	  ext       uvarint length (0..maxExtLen) + that many bytes: a sequence of
//	            (tag uvarint, value uvarint) pairs, each tag at most once, in
//	            increasing order; a field whose value is 0 is left out.
//	            Tags this build does not know are skipped, so later fields
//	            need no new version. Known tags:
//	              1 head   microseconds, rounded up: age of the sender's
//	                       oldest waiting request that may still move, when
//	                       the entry was built (relays keep it; age grows)
//	              2 flags  bit 0: unavailable (the node's app is not ready:
//	                       no transfer, pull or dispatch may target it);
//	                       other bits are reserved and ignored
//	              3 work   microseconds: the sender's predicted work (its
//	                       load index in time; 0 when it does not compute it)
//
// The first entry is the sender's own; further entries (piggyback mechanism
// only) are relayed. A message must be consumed exactly: trailing bytes make
// it malformed. A direct message for "node-07" with policy "nu" and no
// extension fields is 34 bytes.
//
// A version 1 member drops version 2 messages as foreign, so in a rolling
// upgrade from version 1 the members of the old build stop seeing the new
// ones' loads until they are upgraded too (they still see membership).
const (
	wireVersion = 2
	// maxExtLen bounds an entry's extension block.
	maxExtLen  = 64
	maxEntries = 1024
	// maxWireAge bounds a relayed age so that sums cannot overflow.
	maxWireAge = time.Hour
)

var wireMagic = [2]byte{'S', 'L'}

// Node meta, version 1: 'S' 'M', version 1, role byte (0 node,
// 1 dispatcher), uvarint length + gRPC address. It is versioned apart from
// the load message.
var metaMagic = [2]byte{'S', 'M'}

const metaVersion = 1

var (
	// errForeign: not an SWD load message (other magic, or a version this
	// build does not speak).
	errForeign = errors.New("foreign message")
	// errMalformed: SWD magic and version but an undecodable body.
	errMalformed = errors.New("malformed message")
)

// wireEntry is one decoded entry; name and policy alias the message buffer.
type wireEntry struct {
	name     []byte
	boot     uint64
	seq      uint64
	load     uint64
	conc     uint64
	policy   []byte
	epoch    int64
	interval uint64
	age      time.Duration
	ext      wireExt
}

// Extension tags (see the message format).
const (
	extHead  = 1
	extFlags = 2
	extWork  = 3
)

// Flag bits of the flags extension field.
const (
	flagUnavailable = 1 << 0
)

// wireExt is an entry's extension fields; the zero value sends none.
type wireExt struct {
	head  time.Duration // age of the oldest movable waiting request; 0: none
	flags uint64
	work  time.Duration // predicted work; 0: not computed
}

// toWireUS converts a duration to whole microseconds on the wire, rounding
// up so that a positive duration never encodes as 0, and capping at
// maxWireAge.
func toWireUS(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	d = min(d, maxWireAge)
	return uint64((d + time.Microsecond - 1) / time.Microsecond)
}

// appendHeader starts a message of count entries.
func appendHeader(b []byte, count int) []byte {
	b = append(b, wireMagic[0], wireMagic[1], wireVersion)
	return binary.AppendUvarint(b, uint64(count))
}

// appendEntry appends one entry. Names and policies longer than the limits
// are the caller's bug: Validate rejects such names, and policy names are
// registry constants.
func appendEntry(b []byte, name string, boot, seq uint64, load, conc int, p PolicyStamp, age time.Duration, x wireExt) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint64(b, boot)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, uint64(max(load, 0)))
	b = binary.AppendUvarint(b, uint64(max(conc, 0)))
	pn := p.Name
	if len(pn) > maxPolicyLen {
		pn = pn[:maxPolicyLen]
	}
	b = binary.AppendUvarint(b, uint64(len(pn)))
	b = append(b, pn...)
	b = binary.AppendVarint(b, p.Epoch)
	b = binary.AppendUvarint(b, uint64(max(p.ActivationInterval, 0)))
	age = min(max(age, 0), maxWireAge)
	b = binary.AppendUvarint(b, uint64(age/time.Microsecond))
	return appendExt(b, x)
}

// appendExt appends the extension block of x.
func appendExt(b []byte, x wireExt) []byte {
	var buf [3 * 2 * binary.MaxVarintLen64]byte
	e := buf[:0]
	if v := toWireUS(x.head); v > 0 {
		e = binary.AppendUvarint(binary.AppendUvarint(e, extHead), v)
	}
	if x.flags != 0 {
		e = binary.AppendUvarint(binary.AppendUvarint(e, extFlags), x.flags)
	}
	if v := toWireUS(x.work); v > 0 {
		e = binary.AppendUvarint(binary.AppendUvarint(e, extWork), v)
	}
	b = binary.AppendUvarint(b, uint64(len(e)))
	return append(b, e...)
}

// parseExt decodes an extension block: known tags into x, unknown ones
// skipped. Tags must increase (so each appears once).
func parseExt(b []byte) (wireExt, bool) {
	var x wireExt
	r := reader{b: b}
	last := uint64(0)
	for len(r.b) > 0 {
		tag, v := r.uvarint(), r.uvarint()
		if r.err || tag <= last {
			return wireExt{}, false
		}
		last = tag
		switch tag {
		case extHead, extWork:
			if v > uint64(maxWireAge/time.Microsecond) {
				return wireExt{}, false
			}
			d := time.Duration(v) * time.Microsecond
			if tag == extHead {
				x.head = d
			} else {
				x.work = d
			}
		case extFlags:
			x.flags = v
		}
	}
	return x, true
}

// parseMessage decodes b and calls visit for each entry (visit may be nil to
// only validate). It validates the whole message before the first visit, so
// a malformed message never reaches the view in part.
func parseMessage(b []byte, visit func(*wireEntry)) (int, error) {
	n, err := walkMessage(b, nil)
	if err != nil || visit == nil {
		return n, err
	}
	return walkMessage(b, visit)
}

func walkMessage(b []byte, visit func(*wireEntry)) (int, error) {
	if len(b) < 3 || b[0] != wireMagic[0] || b[1] != wireMagic[1] {
		return 0, errForeign
	}
	version := b[2]
	if version != 1 && version != wireVersion {
		return 0, fmt.Errorf("%w: version %d", errForeign, version)
	}
	r := reader{b: b[3:]}
	count := r.uvarint()
	if r.err || count == 0 || count > maxEntries {
		return 0, fmt.Errorf("%w: bad entry count", errMalformed)
	}
	var e wireEntry
	for i := uint64(0); i < count; i++ {
		e.name = r.bytes(maxNameLen)
		e.boot = r.fixed64()
		e.seq = r.uvarint()
		e.load = r.uvarint()
		e.conc = r.uvarint()
		e.policy = r.bytes(maxPolicyLen)
		e.epoch = r.varint()
		e.interval = r.uvarint()
		ageUS := r.uvarint()
		e.ext = wireExt{}
		extOK := true
		if version >= 2 {
			e.ext, extOK = parseExt(r.bytes(maxExtLen))
		}
		switch {
		case r.err:
			return 0, fmt.Errorf("%w: entry %d truncated", errMalformed, i)
		case len(e.name) == 0:
			return 0, fmt.Errorf("%w: entry %d has no name", errMalformed, i)
		case e.load > math.MaxInt32 || e.conc > math.MaxInt32:
			return 0, fmt.Errorf("%w: entry %d load out of range", errMalformed, i)
		case e.interval > math.MaxInt64:
			return 0, fmt.Errorf("%w: entry %d interval out of range", errMalformed, i)
		case ageUS > uint64(maxWireAge/time.Microsecond):
			return 0, fmt.Errorf("%w: entry %d age out of range", errMalformed, i)
		case !extOK:
			return 0, fmt.Errorf("%w: entry %d has a bad extension block", errMalformed, i)
		}
		e.age = time.Duration(ageUS) * time.Microsecond
		if visit != nil {
			visit(&e)
		}
	}
	if len(r.b) != 0 {
		return 0, fmt.Errorf("%w: %d trailing bytes", errMalformed, len(r.b))
	}
	return int(count), nil
}

// reader decodes without allocating; the first error sticks.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) uvarint() uint64 {
	if r.err {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) fixed64() uint64 {
	if r.err || len(r.b) < 8 {
		r.err = true
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) bytes(limit int) []byte {
	n := r.uvarint()
	if r.err || n > uint64(limit) || n > uint64(len(r.b)) {
		r.err = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// nodeMeta is what a member advertises in memberlist's node meta.
type nodeMeta struct {
	Role     string
	GRPCAddr string
}

func encodeMeta(m nodeMeta) []byte {
	b := []byte{metaMagic[0], metaMagic[1], metaVersion, 0}
	if m.Role == RoleDispatcher {
		b[3] = 1
	}
	b = binary.AppendUvarint(b, uint64(len(m.GRPCAddr)))
	return append(b, m.GRPCAddr...)
}

func decodeMeta(b []byte) (nodeMeta, error) {
	if len(b) < 4 || b[0] != metaMagic[0] || b[1] != metaMagic[1] {
		return nodeMeta{}, fmt.Errorf("%w: no swd node meta", errForeign)
	}
	if b[2] != metaVersion {
		return nodeMeta{}, fmt.Errorf("%w: node meta version %d", errForeign, b[2])
	}
	var m nodeMeta
	switch b[3] {
	case 0:
		m.Role = RoleNode
	case 1:
		m.Role = RoleDispatcher
	default:
		return nodeMeta{}, fmt.Errorf("%w: role byte %d", errMalformed, b[3])
	}
	r := reader{b: b[4:]}
	addr := r.bytes(maxGRPCLen)
	if r.err || len(r.b) != 0 {
		return nodeMeta{}, fmt.Errorf("%w: node meta", errMalformed)
	}
	m.GRPCAddr = string(addr)
	return m, nil
}
