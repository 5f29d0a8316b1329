package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cmdStats maps a Redis command name (as INFO commandstats spells it,
// e.g. "incrby" or "client|setname") to its cumulative call count.
type cmdStats map[string]int64

// readCommandStats connects to the Redis at addr, sends
// INFO commandstats and parses the cmdstat_<name>:calls=N,... lines.
// It speaks just enough RESP for that one command, so that the load
// client needs no Redis library.
func readCommandStats(addr string) (cmdStats, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n"); err != nil {
		return nil, err
	}
	body, err := readBulk(bufio.NewReader(conn))
	if err != nil {
		return nil, err
	}
	return parseCommandStats(body), nil
}

// readBulk reads one RESP reply that must be a bulk string (or, with
// RESP3, a verbatim string) and returns its payload.
func readBulk(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '-':
		return "", fmt.Errorf("redis error: %s", line[1:])
	case '$', '=':
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return "", fmt.Errorf("bad bulk length %q", line)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// parseCommandStats extracts the calls= figure of every cmdstat_ line.
func parseCommandStats(body string) cmdStats {
	stats := cmdStats{}
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					stats[name] = n
				}
			}
		}
	}
	return stats
}

// cmdDelta is one command's number of calls during a run.
type cmdDelta struct {
	name  string
	calls int64
}

// diffStats returns the commands called between before and after,
// busiest first, leaving out INFO (the harness's own probe), and their
// total.
func diffStats(before, after cmdStats) ([]cmdDelta, int64) {
	var out []cmdDelta
	var total int64
	for name, n := range after {
		if name == "info" {
			continue
		}
		d := n - before[name]
		if d <= 0 {
			continue
		}
		out = append(out, cmdDelta{name, d})
		total += d
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].calls != out[j].calls {
			return out[i].calls > out[j].calls
		}
		return out[i].name < out[j].name
	})
	return out, total
}

// formatBreakdown renders deltas as "incrby:600,expire:600", or "-"
// when there are none.
func formatBreakdown(ds []cmdDelta) string {
	if len(ds) == 0 {
		return "-"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s:%d", d.name, d.calls)
	}
	return strings.Join(parts, ",")
}
