package main

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// failedOpen fetches a Prometheus text page at url and sums the
// samples of ratelimit_decisions_total whose outcome is "failed-open":
// the calls that ratelimit-rls answered OK without its store deciding
// them (a store timeout, or the circuit breaker open). It returns -1
// when url is empty.
func failedOpen(url string) (float64, error) {
	if url == "" {
		return -1, nil
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ratelimit_decisions_total{") ||
			!strings.Contains(line, `outcome="failed-open"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// failOpenFields renders the failed-open calls between two readings,
// or "" when they were not taken.
func failOpenFields(before, after float64) string {
	if before < 0 || after < 0 {
		return ""
	}
	return fmt.Sprintf(" failed_open=%.0f", after-before)
}
