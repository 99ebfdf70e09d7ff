package grpcfast

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerBlock is a stream's decoded header block.
type headerBlock struct {
	id uint32
	// fields are the decoder's, read's: valid until its next read (a
	// stream keeps a copy).
	fields    []hpack.HeaderField
	end       bool // END_STREAM
	truncated bool // past MaxHeaderListSize: the fields are incomplete
}

// pseudo returns the value of the pseudo-header :name, "" when absent.
func (h *headerBlock) pseudo(name string) string {
	for _, f := range h.fields {
		if !strings.HasPrefix(f.Name, ":") {
			break
		}
		if f.Name[1:] == name {
			return f.Value
		}
	}
	return ""
}

// hdecoder decodes header blocks with the checks of x/net/http2's
// Framer.ReadMetaHeaders (which grpc-go's server uses), into a slice it
// reuses: one allocation per block (the fields the stream keeps) instead
// of a frame, a closure and a growing slice.
type hdecoder struct {
	dec        *hpack.Decoder
	max        uint32 // the header list's bound
	fields     []hpack.HeaderField
	hdrRemain  uint32
	trlRemain  uint32
	sawRegular bool
	invalid    error
	truncated  bool
}

func newHDecoder(max uint32) *hdecoder {
	d := &hdecoder{max: max}
	d.dec = hpack.NewDecoder(4096, d.emit)
	return d
}

var errPseudoAfterRegular = errors.New("pseudo header field after regular")

func (d *hdecoder) emit(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		d.invalid = fmt.Errorf("invalid header field value for %q", hf.Name)
	} else if strings.HasPrefix(hf.Name, ":") {
		if d.sawRegular {
			d.invalid = errPseudoAfterRegular
		}
	} else {
		d.sawRegular = true
		if !validWireHeaderFieldName(hf.Name) {
			d.invalid = fmt.Errorf("invalid header field name %q", hf.Name)
		}
	}
	if d.invalid != nil {
		d.dec.SetEmitEnabled(false)
		return
	}
	remain, size := &d.hdrRemain, hf.Size()
	if hf.Name == "trailer" {
		n := uint32(strings.Count(hf.Value, ",") + 1)
		remain, size = &d.trlRemain, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *remain {
		d.dec.SetEmitEnabled(false)
		d.truncated = true
		d.hdrRemain, d.trlRemain = 0, 0
		return
	}
	*remain -= size
	d.fields = append(d.fields, hf)
}

// read decodes the block that starts with hf, reading its CONTINUATION
// frames from fr. A connection error ends the connection, a stream error
// the stream, as Framer.ReadMetaHeaders's do.
func (d *hdecoder) read(fr *http2.Framer, hf *http2.HeadersFrame) (headerBlock, error) {
	d.fields, d.sawRegular, d.invalid, d.truncated = d.fields[:0], false, nil, false
	d.hdrRemain, d.trlRemain = d.max, d.max
	d.dec.SetEmitEnabled(true)
	d.dec.SetMaxStringLength(int(d.max))
	id, end := hf.StreamID, hf.StreamEnded()
	frag, ended := hf.HeaderBlockFragment(), hf.HeadersEnded()
	for {
		// Past twice what the list may still hold, or after an invalid
		// field, the rest is not decoded: the connection ends.
		if int64(len(frag)) > 2*int64(d.hdrRemain+d.trlRemain) || d.invalid != nil {
			return headerBlock{}, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := d.dec.Write(frag); err != nil {
			return headerBlock{}, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return headerBlock{}, err
		}
		cf := f.(*http2.ContinuationFrame) // the framer checks the order
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if err := d.dec.Close(); err != nil {
		return headerBlock{}, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if d.invalid != nil {
		return headerBlock{}, http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: d.invalid}
	}
	if err := checkPseudos(d.fields); err != nil {
		return headerBlock{}, http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return headerBlock{id: id, fields: d.fields, end: end, truncated: d.truncated}, nil
}

// validWireHeaderFieldName is x/net/http2's: a token, in lower case.
func validWireHeaderFieldName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// checkPseudos is x/net/http2's MetaHeadersFrame.checkPseudos: known
// pseudo-headers, each once, of a request or a response, not both.
func checkPseudos(fields []hpack.HeaderField) error {
	var isRequest, isResponse bool
	n := 0
	for n < len(fields) && strings.HasPrefix(fields[n].Name, ":") {
		n++
	}
	pf := fields[:n]
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			isRequest = true
		case ":status":
			isResponse = true
		default:
			return fmt.Errorf("invalid pseudo-header %q", hf.Name)
		}
		for _, hf2 := range pf[:i] {
			if hf.Name == hf2.Name {
				return fmt.Errorf("duplicate pseudo-header %q", hf.Name)
			}
		}
	}
	if isRequest && isResponse {
		return errors.New("mix of request and response pseudo headers")
	}
	return nil
}
