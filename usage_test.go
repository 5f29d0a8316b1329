package ratelimit

import (
	"encoding/json"
	"testing"
	"time"
)

// Usage encodes to JSON as a gateway answers it: lower-case keys, and the
// window and reset in whole seconds, rounded up as the headers round them.
func TestUsageJSON(t *testing.T) {
	us := []Usage{
		{Name: "month", Limit: 100, Window: 31 * 24 * time.Hour, Used: 3, Remaining: 97, Reset: 14*24*time.Hour - 300*time.Millisecond},
		{Name: "default", Limit: 5, Window: 1500 * time.Millisecond, Remaining: 5},
	}
	month := `{"name":"month","limit":100,"used":3,"remaining":97,"window":2678400,"reset":1209600}`
	want := `[` + month + `,{"name":"default","limit":5,"used":0,"remaining":5,"window":2,"reset":0}]`
	if b, err := json.Marshal(us); err != nil || string(b) != want {
		t.Fatalf("json.Marshal(%+v) =\n%s (%v)\nwant\n%s", us, b, err, want)
	}
	if b, err := json.Marshal(&us[0]); err != nil || string(b) != month {
		t.Errorf("json.Marshal(&Usage) = %s (%v), want %s", b, err, month)
	}
}
