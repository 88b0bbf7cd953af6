package natsnode

import (
	"errors"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	cases := []struct {
		v  string
		ok bool
	}{{"2.15.2", true}, {"2.11.0", true}, {"3.0.0", true}, {"v2.12.1", true}, {"2.10.22", false}, {"2.9.0", false}, {"1.4.1", false}, {"", false}, {"garbage", false}}
	for _, c := range cases {
		err := checkVersion(c.v)
		if (err == nil) != c.ok {
			t.Errorf("checkVersion(%q) = %v", c.v, err)
		}
		if err != nil && !errors.Is(err, ErrServerTooOld) {
			t.Errorf("checkVersion(%q) = %v, not ErrServerTooOld", c.v, err)
		}
	}
}
