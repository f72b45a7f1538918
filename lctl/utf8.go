package lctl

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"
)

// EncodingError is input that is not UTF-8: the offset of the first byte
// that is not part of a valid UTF-8 sequence. Chain files are UTF-8 (JSON
// and YAML both say so); reading such a byte as U+FFFD would change the
// text, and so the hash, without anyone noticing.
type EncodingError struct {
	// Offset is the 0-based byte offset of the bad byte in the input.
	Offset int64
	// Line and Column (1-based, column in bytes) locate it, when known.
	Line, Column int
	// Byte is the offending byte.
	Byte byte
	// UTF16 is set when the input starts with a UTF-16 byte order mark.
	UTF16 bool
}

func (e *EncodingError) Error() string {
	if e.UTF16 {
		return "the input is UTF-16 (it starts with a UTF-16 byte order mark); chain files are UTF-8: convert it first (e.g. iconv -f UTF-16 -t UTF-8)"
	}
	where := fmt.Sprintf("byte offset %d", e.Offset)
	if e.Line > 0 {
		where += fmt.Sprintf(" (line %d, column %d)", e.Line, e.Column)
	}
	return fmt.Sprintf("invalid UTF-8 at %s: byte 0x%02x is not part of a UTF-8 character; chain files must be UTF-8", where, e.Byte)
}

// CheckUTF8 returns an *EncodingError naming the first byte of b that is
// not valid UTF-8, with its line and column, or nil. A UTF-16 byte order
// mark at the start is reported as such.
func CheckUTF8(b []byte) error {
	if len(b) >= 2 && (b[0] == 0xFF && b[1] == 0xFE || b[0] == 0xFE && b[1] == 0xFF) {
		return &EncodingError{UTF16: true}
	}
	if utf8.Valid(b) {
		return nil
	}
	off := invalidAt(b)
	line, col := lineCol(b, int64(off))
	return &EncodingError{Offset: int64(off), Line: line, Column: col, Byte: b[off]}
}

// invalidAt returns the offset of the first invalid byte of b (len(b) when
// b is valid).
func invalidAt(b []byte) int {
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// UTF8Reader wraps a reader and fails with an *EncodingError (its Offset
// counted from the first byte read, its Line counted too) at the first byte
// that is not valid UTF-8, for decoders that stream a file rather than hold
// it. A character split between two reads is checked once it is whole.
type UTF8Reader struct {
	r       io.Reader
	off     int64 // offset of the first byte not yet checked
	line    int   // lines before off
	lastNL  int64 // offset just after the last newline before off
	pending []byte
	err     error
	started bool
}

// NewUTF8Reader returns a reader that passes r's bytes through and fails at
// the first invalid UTF-8 byte.
func NewUTF8Reader(r io.Reader) *UTF8Reader { return &UTF8Reader{r: r, line: 1} }

func (u *UTF8Reader) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	n, err := u.r.Read(p)
	if n > 0 {
		if cerr := u.check(p[:n], err == io.EOF); cerr != nil {
			u.err = cerr
			return 0, cerr
		}
	}
	if err == io.EOF && len(u.pending) > 0 {
		u.err = u.fail(u.pending, 0)
		return n, u.err
	}
	return n, err
}

// check validates chunk, carrying an incomplete final character over to
// the next read.
func (u *UTF8Reader) check(chunk []byte, eof bool) error {
	if !u.started {
		u.started = true
		if len(chunk) >= 2 && (chunk[0] == 0xFF && chunk[1] == 0xFE || chunk[0] == 0xFE && chunk[1] == 0xFF) {
			return &EncodingError{UTF16: true}
		}
	}
	b := chunk
	if len(u.pending) > 0 {
		b = append(u.pending, chunk...)
		u.pending = nil
	}
	end := len(b)
	if !eof {
		// Hold back an incomplete character at the end.
		for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
			c := b[len(b)-k]
			if c < utf8.RuneSelf {
				break
			}
			if utf8.RuneStart(c) {
				if !utf8.FullRune(b[len(b)-k:]) {
					end = len(b) - k
				}
				break
			}
		}
	}
	if bad := invalidAt(b[:end]); bad < end {
		return u.fail(b, bad)
	}
	u.advance(b[:end])
	if end < len(b) {
		u.pending = append([]byte(nil), b[end:]...)
	}
	return nil
}

func (u *UTF8Reader) advance(b []byte) {
	if n := bytes.Count(b, []byte{'\n'}); n > 0 {
		u.line += n
		u.lastNL = u.off + int64(bytes.LastIndexByte(b, '\n')) + 1
	}
	u.off += int64(len(b))
}

func (u *UTF8Reader) fail(b []byte, bad int) error {
	u.advance(b[:bad])
	return &EncodingError{Offset: u.off, Line: u.line, Column: int(u.off-u.lastNL) + 1, Byte: b[bad]}
}
