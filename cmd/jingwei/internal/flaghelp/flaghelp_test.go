package flaghelp

import (
	"bytes"
	"flag"
	"testing"
	"time"
)

// TestWrite spells every flag with two dashes and shows a default only
// when it is not the zero value, quoted for a string.
func TestWrite(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("prefix", "jw", "subject prefix")
	fs.String("out", "", "file to write")
	fs.Bool("json", false, "print JSON")
	fs.Duration("wait", 2*time.Second, "how long")
	fs.Int("n", 0, "how many (default: all)")
	var b bytes.Buffer
	Write(&b, fs)
	want := "  --json\n    \tprint JSON\n" +
		"  --n int\n    \thow many (default: all)\n" +
		"  --out string\n    \tfile to write\n" +
		"  --prefix string\n    \tsubject prefix (default \"jw\")\n" +
		"  --wait duration\n    \thow long (default 2s)\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
