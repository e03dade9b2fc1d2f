// Package chstore keeps what `spanprof serve --store clickhouse://…`
// receives in ClickHouse, over its HTTP interface, and answers the trace
// pages and the JSON API from it with the same code as the in-memory
// window (live.BuildTrace and friends). The SQL runs unchanged on
// ClickHouse 18.16 (Debian's clickhouse-server) and on current releases.
package chstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Conn runs SQL on a ClickHouse server. Query returns the result in
// RowBinary; Insert sends rows already in RowBinary.
type Conn interface {
	Exec(ctx context.Context, sql string) error
	Insert(ctx context.Context, table string, cols []column, rows []byte) error
	Query(ctx context.Context, sql string) ([]byte, error)
}

// Target is a parsed --store clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE.
type Target struct {
	// Base is the HTTP interface's URL (no credentials).
	Base           string
	User, Password string
	Database       string
}

var dbName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParseURL reads a --store value.
func ParseURL(s string) (Target, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "clickhouse" || u.Host == "" {
		return Target{}, fmt.Errorf("parse store %q: want clickhouse://HOST:PORT/DATABASE (the HTTP interface, port 8123 by default)", s)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":8123"
	}
	db := strings.Trim(u.Path, "/")
	if db == "" {
		db = "spanprof"
	}
	if !dbName.MatchString(db) {
		return Target{}, fmt.Errorf("parse store %q: database name %q: want letters, digits and _", s, db)
	}
	t := Target{Base: "http://" + host + "/", Database: db}
	if u.User != nil {
		t.User = u.User.Username()
		t.Password, _ = u.User.Password()
	}
	return t, nil
}

// String names the store without its password.
func (t Target) String() string {
	return "clickhouse://" + strings.TrimSuffix(strings.TrimPrefix(t.Base, "http://"), "/") + "/" + t.Database
}

// httpConn talks to ClickHouse's HTTP interface.
type httpConn struct {
	t      Target
	client *http.Client
}

// NewHTTPConn returns a Conn to t; timeout bounds each request.
func NewHTTPConn(t Target, timeout time.Duration) Conn {
	return &httpConn{t: t, client: &http.Client{Timeout: timeout}}
}

// ErrServer marks an answer of the server itself (bad SQL, a missing
// table), as opposed to not reaching it.
var ErrServer = errors.New("clickhouse")

func (c *httpConn) do(ctx context.Context, query string, body []byte) ([]byte, error) {
	u := c.t.Base
	if query != "" {
		u += "?query=" + url.QueryEscape(query)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.t.User != "" {
		req.SetBasicAuth(c.t.User, c.t.Password)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		// The url.Error would repeat the whole query in the URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("reach clickhouse at %s: %w", c.t.Base, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read clickhouse answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrServer, resp.Status, msg)
	}
	return out, nil
}

func (c *httpConn) Exec(ctx context.Context, sql string) error {
	_, err := c.do(ctx, "", []byte(sql))
	return err
}

func (c *httpConn) Insert(ctx context.Context, table string, cols []column, rows []byte) error {
	_, err := c.do(ctx, insertSQL(table, cols), rows)
	return err
}

func (c *httpConn) Query(ctx context.Context, sql string) ([]byte, error) {
	return c.do(ctx, "", []byte(sql+" FORMAT RowBinary"))
}

func insertSQL(table string, cols []column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") FORMAT RowBinary"
}
