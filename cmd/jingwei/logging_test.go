package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	tests := []struct {
		format, level string
		wantErr       bool
		// logged says whether an info message is written; json whether it
		// is one JSON object.
		logged, json bool
	}{
		{"", "", false, true, true},
		{"json", "info", false, true, true},
		{"JSON", "debug", false, true, true},
		{"console", "info", false, true, false},
		{"json", "warn", false, false, true},
		{"json", "disabled", false, false, true},
		{"yaml", "info", true, false, false},
		{"json", "loud", true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.format+"/"+tt.level, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := newLogger(&buf, tt.format, tt.level)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %t", err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "want") {
					t.Errorf("error %q does not name the accepted values", err)
				}
				return
			}
			log.Info().Str("session", "s-1").Msg("hello")
			out := buf.String()
			if got := strings.Contains(out, "hello"); got != tt.logged {
				t.Fatalf("logged %t, want %t: %q", got, tt.logged, out)
			}
			if !tt.logged {
				return
			}
			var m map[string]any
			isJSON := json.Unmarshal([]byte(out), &m) == nil
			if isJSON != tt.json {
				t.Fatalf("JSON %t, want %t: %q", isJSON, tt.json, out)
			}
			if !strings.Contains(out, "s-1") {
				t.Errorf("field missing: %q", out)
			}
		})
	}
}

func TestLogFlagsFromEnvironment(t *testing.T) {
	t.Setenv("JINGWEI_LOG_FORMAT", "console")
	t.Setenv("JINGWEI_LOG_LEVEL", "error")
	fs := newFlags("x", "", "", &bytes.Buffer{})
	var lf logFlags
	lf.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if lf.format != "console" || lf.level != "error" {
		t.Fatalf("flags from env: %+v", lf)
	}
	if err := fs.Parse([]string{"--log-format", "json"}); err != nil || lf.format != "json" {
		t.Fatalf("flag over env: %+v %v", lf, err)
	}
}
