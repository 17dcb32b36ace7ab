package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// Event streams (a command's events, a template build's log) are NDJSON,
// or SSE when the client accepts text/event-stream: one writer frames both,
// flushes each event and sends heartbeats while nothing happens.

// eventWriter writes events as NDJSON or SSE and flushes each one.
type eventWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	sse bool
}

func newEventWriter(w http.ResponseWriter, r *http.Request) *eventWriter {
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	h := w.Header()
	if sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ew := &eventWriter{w: w, rc: http.NewResponseController(w), sse: sse}
	ew.flush()
	return ew
}

func (ew *eventWriter) flush() error {
	err := ew.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}

// event writes a command event (its seq is the SSE id).
func (ew *eventWriter) event(e apiv1.Event) error { return ew.json(e, e.Seq) }

// json writes one event value as NDJSON or SSE (id: seq when not 0). Both
// streams, command events and build logs, frame their events here.
func (ew *eventWriter) json(v any, seq uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var buf []byte
	if ew.sse {
		if seq > 0 {
			buf = append(buf, "id: "+strconv.FormatUint(seq, 10)+"\n"...)
		}
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
	} else {
		buf = append(b, '\n')
	}
	if _, err := ew.w.Write(buf); err != nil {
		return err
	}
	return ew.flush()
}

func (ew *eventWriter) heartbeat() error {
	var err error
	if ew.sse {
		_, err = io.WriteString(ew.w, ": heartbeat\n\n")
	} else {
		_, err = io.WriteString(ew.w, `{"type":"heartbeat"}`+"\n")
	}
	if err != nil {
		return err
	}
	return ew.flush()
}

// afterParam reads ?after=, or SSE's Last-Event-ID when after is absent.
func afterParam(r *http.Request) (uint64, error) {
	v := r.URL.Query().Get("after")
	if v == "" {
		v = r.Header.Get("Last-Event-ID")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, invalid(map[string]string{"after": "must be a non-negative integer (an event seq)"})
	}
	return n, nil
}
