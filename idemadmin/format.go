package idemadmin

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// timeLayout is how the text views print times: UTC, to the second, so
// that output does not depend on the machine's zone.
const timeLayout = "2006-01-02 15:04:05Z"

// formatTime prints t in UTC to the second, or "-" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// formatAge prints a duration compactly, in its two largest units:
// "45s", "5m", "2h5m", "3d4h". Negative durations print as zero.
func formatAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		m, s := d/time.Minute, (d%time.Minute)/time.Second
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 24*time.Hour:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	default:
		days, h := d/(24*time.Hour), (d%(24*time.Hour))/time.Hour
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
}

// relative prints t against now: "5m ago", "in 23h", "now"; "-" for zero.
func relative(t, now time.Time) string {
	switch {
	case t.IsZero():
		return "-"
	case t.Equal(now):
		return "now"
	case t.Before(now):
		return formatAge(now.Sub(t)) + " ago"
	default:
		return "in " + formatAge(t.Sub(now))
	}
}

// quote prints a scope or key so that a table column stays readable: as
// is when it is plain, quoted when it is empty or holds a space or a quote
// (keys are printable ASCII, spaces included).
func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \"\\\t") {
		return strconv.Quote(s)
	}
	return s
}

// plural returns "1 claim", "2 claims".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(n, 10) + " " + many
}

// formatBytes prints a byte count in binary units: "512 B", "1.5 KiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
