package storecodec

import (
	"errors"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []Cursor{{At: 0, ID: "a"}, {At: -5, ID: "sb_1:2"}, {At: 1764600000123456789, ID: "op_x"}} {
		got, err := DecodeCursor(EncodeCursor(c.At, c.ID))
		if err != nil || got == nil || *got != c {
			t.Errorf("round trip of %+v: got %+v, %v", c, got, err)
		}
	}
	if got, err := DecodeCursor(""); got != nil || err != nil {
		t.Errorf("empty token: got %+v, %v; want the first page", got, err)
	}
}

func TestDecodeCursorRejects(t *testing.T) {
	for _, tok := range []string{"!!", EncodeCursor(1, ""), "MTIz", "eDph"} { // no id; "123" has no colon; "x:a" no number
		if _, err := DecodeCursor(tok); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("token %q: err %v, want invalid argument", tok, err)
		}
	}
}

func TestPageSize(t *testing.T) {
	for in, want := range map[int]int{-1: store.DefaultPageSize, 0: store.DefaultPageSize, 1: 1,
		store.MaxPageSize: store.MaxPageSize, store.MaxPageSize + 1: store.MaxPageSize} {
		if got := PageSize(in); got != want {
			t.Errorf("PageSize(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestCutPage(t *testing.T) {
	at := time.Unix(10, 5).UTC()
	key := func(s string) (time.Time, string) { return at, s }
	page := CutPage([]string{"a", "b", "c"}, 2, key)
	if len(page.Items) != 2 || page.Items[1] != "b" {
		t.Fatalf("items %v, want [a b]", page.Items)
	}
	cur, err := DecodeCursor(page.NextPageToken)
	if err != nil || cur.At != Nanos(at) || cur.ID != "b" {
		t.Errorf("next token points at %+v (%v), want the last item b at %d", cur, err, Nanos(at))
	}
	if last := CutPage([]string{"a", "b"}, 2, key); last.NextPageToken != "" || len(last.Items) != 2 {
		t.Errorf("a full last page: %+v, want both items and no token", last)
	}
}

func TestTimesAndNulls(t *testing.T) {
	local := time.Date(2026, 12, 1, 15, 4, 5, 123456789, time.FixedZone("x", 3600))
	if got := FromNanos(Nanos(local)); !got.Equal(local) || got.Location() != time.UTC {
		t.Errorf("time round trip: %v, want %v in UTC", got, local)
	}
	if NullNanos(nil) != nil || TimePtr(nil) != nil || NormPtr(nil) != nil {
		t.Error("a nil time must stay NULL both ways")
	}
	if got := TimePtr(NullNanos(&local)); got == nil || !got.Equal(local) {
		t.Errorf("optional time round trip: %v", got)
	}
	if RawText(nil) != nil || RawFrom(nil) != nil || RawFrom(new(string)) != nil {
		t.Error("empty raw JSON must be NULL")
	}
}

func TestJSONAndMaps(t *testing.T) {
	type info struct{ Code string }
	in := &info{Code: "x"}
	got, err := JSONFrom[info](JSONText(in))
	if err != nil || got == nil || *got != *in {
		t.Errorf("JSON round trip: %+v, %v", got, err)
	}
	bad := "{not json"
	if _, err := JSONFrom[info](&bad); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("undecodable JSON: %v, want data loss", err)
	}
	if MapText(nil) != "{}" {
		t.Errorf("nil map stored as %q", MapText(nil))
	}
	m, err := MapFrom(MapText(map[string]string{"k": "v"}))
	if err != nil || m["k"] != "v" || len(m) != 1 {
		t.Errorf("map round trip: %v, %v", m, err)
	}
	if _, err := MapFrom("[1]"); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("undecodable map: %v, want data loss", err)
	}
	if NormMap(nil) == nil {
		t.Error("NormMap(nil) is nil")
	}
}
