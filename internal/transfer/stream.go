package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/swderr"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// StreamChunkSize is the most body bytes a ForwardStream sender puts in
// one ForwardChunk (less when ClientConfig.MaxMessageSize is smaller:
// streamOverhead below it).
const StreamChunkSize = 256 << 10

// streamOverhead is the room a chunk leaves in a message for its framing.
const streamOverhead = 4 << 10

// ForwardStream implements the Transfer service: Forward for a body sent
// in chunks after the head. The head is checked (the same refusals as
// Forward) before any body byte is read; the body reaches the Backend as
// r.Body, which yields exactly the announced size or fails.
func (s *Server) ForwardStream(stream swdv1.Transfer_ForwardStreamServer) error {
	first, err := stream.Recv()
	if err != nil {
		return swderr.ToGRPC(fmt.Errorf("%w: no head: %w", swderr.ErrClientGone, err))
	}
	m := first.GetHead()
	switch {
	case m == nil:
		return swderr.ToGRPC(fmt.Errorf("%w: the first message carries no head", swderr.ErrBadRequest))
	case len(m.GetBody()) > 0 || len(first.GetBody()) > 0:
		return swderr.ToGRPC(fmt.Errorf("%w: the head carries body bytes", swderr.ErrBadRequest))
	case first.GetBodySize() < 0:
		return swderr.ToGRPC(fmt.Errorf("%w: negative body size %d", swderr.ErrBadRequest, first.GetBodySize()))
	}
	if err := s.checkHead(stream.Context(), m); err != nil {
		return refuse(stream, err)
	}
	r, in, err := FromMessage(stream.Context(), m)
	if err != nil {
		return swderr.ToGRPC(err)
	}
	size := first.GetBodySize()
	r.Body = &chunkReader{stream: stream, left: size, idle: s.cfg.BodyIdleTimeout}
	r.ContentLength = size
	r.GetBody = nil // the Backend holds the body once it has read it
	in.Streamed = true
	return s.serve(stream, r, in)
}

// chunkReader reads a ForwardStream's body messages. It fails with
// swderr.ErrBadRequest when the body is shorter or longer than announced
// (the end is checked when the last announced bytes arrive, before they
// are handed out, so a reader that stops at the announced size still
// learns of excess bytes), with
// swderr.ErrBodyTimeout after idle without a message, and with
// swderr.ErrClientGone when the call broke. Not safe for concurrent use;
// at most one Recv runs at a time.
type chunkReader struct {
	stream interface {
		Recv() (*swdv1.ForwardChunk, error)
	}
	left    int64 // announced bytes not yet received
	buf     []byte
	idle    time.Duration
	err     error
	pending chan chunkResult // a Recv still running after a timeout
}

type chunkResult struct {
	m   *swdv1.ForwardChunk
	err error
}

// recv waits at most idle for the next message. After a timeout the
// reader is done; the Recv left running ends with the call.
func (c *chunkReader) recv() (*swdv1.ForwardChunk, error) {
	if c.pending == nil {
		ch := make(chan chunkResult, 1)
		c.pending = ch
		go func() {
			m, err := c.stream.Recv()
			ch <- chunkResult{m, err}
		}()
	}
	t := time.NewTimer(c.idle)
	defer t.Stop()
	select {
	case res := <-c.pending:
		c.pending = nil
		return res.m, res.err
	case <-t.C:
		return nil, fmt.Errorf("%w: no body message for %s", swderr.ErrBodyTimeout, c.idle)
	}
}

// end checks that the sender sent nothing after the announced bytes.
func (c *chunkReader) end() error {
	m, err := c.recv()
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case err != nil:
		return c.failed(err)
	case len(m.GetBody()) > 0 || m.GetHead() != nil:
		return fmt.Errorf("%w: more body bytes than the announced size", swderr.ErrBadRequest)
	}
	return c.end() // an empty message: keep looking for the end
}

func (c *chunkReader) failed(err error) error {
	if errors.Is(err, swderr.ErrBodyTimeout) {
		return err
	}
	return fmt.Errorf("%w: receiving body: %w", swderr.ErrClientGone, err)
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for len(c.buf) == 0 {
		if c.left == 0 {
			c.err = c.end()
			return 0, c.err
		}
		m, err := c.recv()
		switch {
		case errors.Is(err, io.EOF):
			c.err = fmt.Errorf("%w: body ended %d bytes short of the announced size", swderr.ErrBadRequest, c.left)
			return 0, c.err
		case err != nil:
			c.err = c.failed(err)
			return 0, c.err
		case m.GetHead() != nil || m.GetBodySize() != 0:
			c.err = fmt.Errorf("%w: a second head", swderr.ErrBadRequest)
			return 0, c.err
		case int64(len(m.GetBody())) > c.left:
			c.err = fmt.Errorf("%w: more body bytes than the announced size", swderr.ErrBadRequest)
			return 0, c.err
		}
		c.buf = m.GetBody()
		c.left -= int64(len(c.buf))
		if c.left == 0 {
			// The last bytes: check the end before handing any of them
			// out, as io.ReadFull and io.CopyN drop an error that comes
			// with the bytes they asked for.
			if err := c.end(); err != io.EOF {
				c.buf, c.err = nil, err
				return 0, err
			}
		}
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	if len(c.buf) == 0 && c.left == 0 {
		c.err = io.EOF // the end was checked when the last bytes came
	}
	return n, nil
}

// Close does nothing: the call's end releases the stream.
func (c *chunkReader) Close() error { return nil }

// ForwardStream is Forward for a body held in body (size bytes), sent in
// chunks of StreamChunkSize after msg, whose Body must be empty. The
// error contract is Forward's; in addition a peer without ForwardStream
// (an older version, codes.Unimplemented) counts as a refusal: it ran
// nothing.
func (c *Client) ForwardStream(ctx context.Context, addr string, msg *swdv1.ForwardRequest, body io.ReaderAt, size int64, w http.ResponseWriter) (Result, error) {
	var res Result
	if len(msg.GetBody()) > 0 {
		return res, errors.Join(swderr.ErrRefused, fmt.Errorf("%w: ForwardStream's head carries a body", swderr.ErrBadRequest))
	}
	cc, err := c.Conn(addr)
	if err != nil {
		return res, errors.Join(swderr.ErrRefused, swderr.ErrUnreachable, err)
	}
	if err := ready(ctx, cc); err != nil {
		return res, errors.Join(swderr.ErrRefused, swderr.ErrUnreachable, fmt.Errorf("peer %s: %w", addr, err))
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := swdv1.NewTransferClient(cc).ForwardStream(sctx)
	if err != nil {
		return res, classify(ctx, nil, err)
	}
	chunk := int64(min(StreamChunkSize, c.cfg.MaxMessageSize-streamOverhead))
	if err := sendBody(stream, msg, body, size, chunk); err != nil {
		// Cut the call: the peer has not got the whole body, so it
		// cannot have queued the request.
		cancel()
		return res, errors.Join(swderr.ErrRefused, err)
	}
	res, err = c.answer(ctx, stream, w, nil)
	if st, ok := status.FromError(err); ok && !res.HeadWritten && st.Code() == codes.Unimplemented {
		return res, errors.Join(swderr.ErrRefused, err)
	}
	return res, err
}

// sendBody sends the head and the body. A peer that ended the call early
// (a refusal of the head) makes Send return io.EOF: sending stops and the
// answer tells why. Other errors are reading the body.
func sendBody(stream swdv1.Transfer_ForwardStreamClient, msg *swdv1.ForwardRequest, body io.ReaderAt, size, chunk int64) error {
	if err := stream.Send(&swdv1.ForwardChunk{Head: msg, BodySize: size}); err != nil {
		return nil // io.EOF: the answer says why
	}
	buf := make([]byte, min(size, chunk))
	for off := int64(0); off < size; {
		n, err := body.ReadAt(buf[:min(size-off, chunk)], off)
		if n > 0 {
			// Send marshals synchronously, so buf may be reused after it returns.
			if serr := stream.Send(&swdv1.ForwardChunk{Body: buf[:n]}); serr != nil {
				return nil
			}
			off += int64(n)
		}
		if err != nil && !(errors.Is(err, io.EOF) && off == size) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read request body at %d of %d bytes: %w", off, size, err)
		}
	}
	_ = stream.CloseSend()
	return nil
}
