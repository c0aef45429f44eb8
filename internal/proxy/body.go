package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/swd-project/swd/internal/swderr"
)

// Request bodies are received whole before their request enters the queue,
// as nginx does by default: a slow uploader may hold a connection, never an
// app slot. Bodies up to MaxTransferBody are kept in memory (and the request
// may move to another node in one message); larger ones are spooled to a
// temporary file (and move by a streamed transfer, ForwardStream; the
// receiving node takes them in through this same path and budgets).
// Every byte held in memory counts against one budget (MaxBufferedBytes),
// every spooled byte against another (MaxSpoolBytes); a request that does
// not fit is refused with 503 (swderr.ErrBufferFull). A body that stalls
// for BodyIdleTimeout is answered 408.

// budget is a count of bytes reserved against a limit. Safe for concurrent
// use.
type budget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes, or reports false (reserving nothing) when they do
// not fit.
func (b *budget) take(n int64) bool {
	for {
		cur := b.used.Load()
		if cur+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// spool makes the temporary files large bodies are received into: in one
// directory per process under root (created on first use), each file
// unlinked as soon as it is open, so no file outlives its request, even
// when the process is killed. Directories left by processes that no longer
// run are removed when a Handler is made.
type spool struct {
	root string
	once sync.Once
	dir  string
	err  error
}

// spoolRoot is the directory every process's spool directory lives in.
func spoolRoot(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "swd-spool")
}

// cleanStaleSpools removes the spool directories under root whose process
// is gone (named "<pid>-..."), and reports how many it removed.
func cleanStaleSpools(root string) int {
	entries, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	removed := 0
	for _, e := range entries {
		pidStr, _, ok := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if os.RemoveAll(filepath.Join(root, e.Name())) == nil {
			removed++
		}
	}
	return removed
}

// processAlive reports whether a process with pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// create returns a new, already unlinked, file in this process's spool
// directory.
func (s *spool) create() (*os.File, error) {
	s.once.Do(func() {
		if s.err = os.MkdirAll(s.root, 0o700); s.err == nil {
			s.dir, s.err = os.MkdirTemp(s.root, strconv.Itoa(os.Getpid())+"-")
		}
	})
	if s.err != nil {
		return nil, fmt.Errorf("spool directory: %w", s.err)
	}
	f, err := os.CreateTemp(s.dir, "body-")
	if err != nil {
		return nil, fmt.Errorf("spool file: %w", err)
	}
	_ = os.Remove(f.Name()) // the open file stays readable
	return f, nil
}

// heldBody is a received body and what it holds of the node's budgets.
type heldBody struct {
	mem, disk int64
	file      *os.File
}

// free gives the body's bytes back and closes its spool file.
func (h *Handler) free(b *heldBody) {
	if b == nil {
		return
	}
	h.memBudget.give(b.mem)
	h.spoolBudget.give(b.disk)
	b.mem, b.disk = 0, 0
	if b.file != nil {
		_ = b.file.Close()
		b.file = nil
	}
}

// idleReader reads a client's body, allowing at most timeout between two
// reads that return data (a connection read deadline, reset on progress).
type idleReader struct {
	r       io.Reader
	rc      *http.ResponseController
	timeout time.Duration
	armed   bool
}

func (ir *idleReader) Read(p []byte) (int, error) {
	if ir.rc != nil && ir.timeout > 0 {
		if err := ir.rc.SetReadDeadline(time.Now().Add(ir.timeout)); err == nil {
			ir.armed = true
		}
	}
	return ir.r.Read(p)
}

// disarm clears the read deadline it set.
func (ir *idleReader) disarm() {
	if ir.armed {
		_ = ir.rc.SetReadDeadline(time.Time{})
	}
}

// bodyError maps an error reading a client's body to the sentinel it is
// answered with.
func (h *Handler) bodyError(r *http.Request, err error) error {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.Is(err, swderr.ErrBodyTimeout), errors.Is(err, swderr.ErrBadRequest), errors.Is(err, swderr.ErrClientGone):
		return err // already classified (a transferred body's reader)
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: more than %d bytes", swderr.ErrBodyTooLarge, h.cfg.MaxBody)
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Errorf("%w: no byte for %s", swderr.ErrBodyTimeout, h.cfg.BodyIdleTimeout)
	case errors.Is(err, swderr.ErrBufferFull):
		return err
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) || r.Context().Err() != nil:
		return fmt.Errorf("%w: reading body: %w", swderr.ErrClientGone, err)
	default:
		return fmt.Errorf("%w: malformed body: %w", swderr.ErrBadRequest, err)
	}
}

// growStep is how much a body of unknown length reserves at a time.
const growStep = 32 << 10

// receive reads the whole body of r (at most MaxBody bytes, checked by
// body) before the request is queued: into memory when it fits
// MaxTransferBody, else into a spool file. It reports the body in memory,
// or the spooled body and its size, and what it holds in held, which the
// caller frees when the request ends, also on error.
func (h *Handler) receive(r *http.Request, body io.Reader, held *heldBody) (mem []byte, spooled io.ReaderAt, size int64, err error) {
	limit := h.cfg.MaxTransferBody
	if cl := r.ContentLength; cl > 0 && cl <= limit {
		// Known length: one buffer of exactly that size.
		if !h.memBudget.take(cl) {
			return nil, nil, 0, fmt.Errorf("%w: %d bytes of bodies held in memory, at most %d (--max-buffered-bytes)",
				swderr.ErrBufferFull, h.memBudget.used.Load(), h.memBudget.limit)
		}
		held.mem = cl
		buf := make([]byte, cl)
		if _, err := io.ReadFull(body, buf); err != nil {
			return nil, nil, 0, h.bodyError(r, err)
		}
		return buf, nil, 0, nil
	}
	var buf []byte
	if r.ContentLength < 0 {
		// Unknown length: grow in memory, reserving as it grows, up to
		// the transfer limit; beyond it, spool.
		for int64(len(buf)) <= limit {
			if len(buf) == cap(buf) {
				next := min(max(int64(2*cap(buf)), growStep), limit+1)
				if !h.memBudget.take(next - int64(cap(buf))) {
					return nil, nil, 0, fmt.Errorf("%w: %d bytes of bodies held in memory, at most %d (--max-buffered-bytes)",
						swderr.ErrBufferFull, h.memBudget.used.Load(), h.memBudget.limit)
				}
				held.mem += next - int64(cap(buf))
				grown := make([]byte, len(buf), next)
				copy(grown, buf)
				buf = grown
			}
			n, err := body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				return buf, nil, 0, nil
			}
			if err != nil {
				return nil, nil, 0, h.bodyError(r, err)
			}
		}
	}
	// Spool: the part already in memory, then the rest.
	f, err := h.spool.create()
	if err != nil {
		return nil, nil, 0, err
	}
	held.file = f
	take := func(n int64) error {
		if !h.spoolBudget.take(n) {
			return fmt.Errorf("%w: %d bytes of bodies spooled, at most %d (--max-spool-bytes)",
				swderr.ErrBufferFull, h.spoolBudget.used.Load(), h.spoolBudget.limit)
		}
		held.disk += n
		return nil
	}
	if r.ContentLength > 0 {
		if err := take(r.ContentLength); err != nil {
			return nil, nil, 0, err
		}
		n, err := io.CopyN(f, body, r.ContentLength)
		if err != nil {
			if n < r.ContentLength && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, 0, h.bodyError(r, err)
		}
		return nil, f, n, nil
	}
	if err := take(int64(len(buf))); err != nil {
		return nil, nil, 0, err
	}
	if _, err := f.Write(buf); err != nil {
		return nil, nil, 0, fmt.Errorf("spool file: %w", err)
	}
	size = int64(len(buf))
	h.memBudget.give(held.mem)
	held.mem = 0
	chunk := make([]byte, growStep)
	for {
		n, rerr := body.Read(chunk)
		if n > 0 {
			if err := take(int64(n)); err != nil {
				return nil, nil, 0, err
			}
			if _, err := f.Write(chunk[:n]); err != nil {
				return nil, nil, 0, fmt.Errorf("spool file: %w", err)
			}
			size += int64(n)
		}
		if rerr == io.EOF {
			return nil, f, size, nil
		}
		if rerr != nil {
			return nil, nil, 0, h.bodyError(r, rerr)
		}
	}
}
