// spdyclient: a test client of kinglet's streaming server that speaks
// SPDY/3.1 through spdystream, the library Kubernetes' own clients use, and
// the remotecommand and port-forward protocols on top, as kubectl does.
//
//	spdyclient exec URL [-stdin] [-tty] [-stderr=false] [-proto P,...] [-resize WxH]
//	    the remote stdout and stderr go to ours, our stdin to the remote one
//	    (closed at our EOF); the error stream's content is printed on our
//	    stderr as "STATUS <text>" at the end.
//	spdyclient portforward URL PORT [-n N] [-request TEXT] [-body]
//	    N concurrent connections to PORT; each sends TEXT, reads to EOF and
//	    prints "<bytes> <sha256>" (one line per connection, in order),
//	    "ERROR <text>" from the error stream, or "REFUSED" if the server
//	    reset its streams.
//	spdyclient upgrade URL [-proto P,...]
//	    prints the HTTP status line and the negotiated protocol, then quits.
//
// For bench/stream-bench, which feeds URLs of Exec on our stdin:
//
//	spdyclient execloop [-proto P]
//	    per line, an exec with error, stdout and stderr streams (as kubectl
//	    creates them: one after the other, each answered): reads both to EOF
//	    and the status; prints "<total> <upgrade> <streams> <status>", the
//	    microseconds of it all, of the upgrade (connect, request, 101) and of
//	    the stream creation after it; closes.
//	spdyclient hold [-proto P]
//	    per line up to an empty one, an exec session with error, stdin,
//	    stdout and stderr streams, kept open; prints "ready N", then waits
//	    for EOF on our stdin and closes them all.
//
// An https URL is dialled with TLS, trusting the CA file in $SPDYCLIENT_CA.
//
// Built by the tests with Debian's golang-go and
// golang-github-docker-spdystream-dev (GO111MODULE=off).
package main

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/spdystream"
)

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func dial(raw string, protos string) (*spdystream.Connection, string, *http.Response) {
	sc, proto, resp, _ := dialConn(raw, protos)
	return sc, proto, resp
}

// dialConn is dial that also returns the TCP connection, for callers that
// close it without spdystream's graceful shutdown.
func dialConn(raw string, protos string) (*spdystream.Connection, string, *http.Response, net.Conn) {
	u, err := url.Parse(raw)
	if err != nil {
		fail("url: %v", err)
	}
	var conn net.Conn
	if u.Scheme == "https" {
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(os.Getenv("SPDYCLIENT_CA"))
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			fail("https needs SPDYCLIENT_CA, a CA file: %v", err)
		}
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", u.Host,
			&tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err != nil {
			fail("dial: %v", err)
		}
	} else {
		conn, err = net.DialTimeout("tcp", u.Host, 10*time.Second)
		if err != nil {
			fail("dial: %v", err)
		}
	}
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n", u.RequestURI(), u.Host)
	for _, p := range strings.Split(protos, ",") {
		if p != "" {
			req += "X-Stream-Protocol-Version: " + p + "\r\n"
		}
	}
	req += "\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		fail("write: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		fail("response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, "", resp, nil
	}
	sc, err := spdystream.NewConnection(&bufConn{conn, br}, false)
	if err != nil {
		fail("spdy: %v", err)
	}
	go sc.Serve(spdystream.NoOpStreamHandler)
	return sc, resp.Header.Get("X-Stream-Protocol-Version"), resp, conn
}

func fail(f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "spdyclient: "+f+"\n", a...)
	os.Exit(99)
}

func stream(sc *spdystream.Connection, h http.Header) *spdystream.Stream {
	s, err := tryStream(sc, h)
	if err != nil {
		fail("%v", err)
	}
	return s
}

// tryStream creates a stream; an error if it was refused (reset) or not
// answered in 30 s.
func tryStream(sc *spdystream.Connection, h http.Header) (*spdystream.Stream, error) {
	s, err := sc.CreateStream(h, nil, false)
	if err != nil {
		return nil, fmt.Errorf("create stream %v: %v", h, err)
	}
	if err := s.WaitTimeout(30 * time.Second); err != nil {
		return nil, fmt.Errorf("stream %v not answered: %v", h, err)
	}
	return s, nil
}

func exec(args []string) {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	stdin := fs.Bool("stdin", false, "send our stdin")
	tty := fs.Bool("tty", false, "a terminal")
	stderr := fs.Bool("stderr", true, "a stderr stream")
	protos := fs.String("proto", "v4.channel.k8s.io", "protocols offered")
	resize := fs.String("resize", "", "WxH sent once")
	fs.Parse(args[1:])
	sc, proto, resp := dial(args[0], *protos)
	if sc == nil {
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("HTTP %d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
		os.Exit(98)
	}
	mk := func(t string) *spdystream.Stream {
		h := http.Header{}
		h.Set("streamType", t)
		return stream(sc, h)
	}
	errS := mk("error")
	var in, out, er, rs *spdystream.Stream
	if *stdin {
		in = mk("stdin")
	}
	out = mk("stdout")
	if *stderr && !*tty {
		er = mk("stderr")
	}
	if *tty && proto != "" && proto != "channel.k8s.io" && proto != "v2.channel.k8s.io" {
		rs = mk("resize")
	}
	var wg sync.WaitGroup
	if in != nil {
		go func() {
			io.Copy(in, os.Stdin)
			in.Close()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(os.Stdout, out)
	}()
	if er != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			io.Copy(os.Stderr, er)
		}()
	}
	if rs != nil && *resize != "" {
		var w, h int
		fmt.Sscanf(*resize, "%dx%d", &w, &h)
		fmt.Fprintf(rs, `{"Width":%d,"Height":%d}`, w, h)
	}
	status, _ := io.ReadAll(errS)
	wg.Wait()
	fmt.Fprintf(os.Stderr, "STATUS %s\n", strings.TrimSpace(string(status)))
	sc.Close()
}

func portforward(args []string) {
	fs := flag.NewFlagSet("portforward", flag.ExitOnError)
	n := fs.Int("n", 1, "connections")
	request := fs.String("request", "", "what each connection sends")
	hold := fs.Duration("hold", 0, "wait this long before reading")
	body := fs.Bool("body", false, "hash only what follows the first blank line (an HTTP body)")
	doHash := fs.Bool("hash", true, "hash what is read (false: count it, print - for the hash)")
	fs.Parse(args[2:])
	t0 := time.Now()
	sc, _, resp := dial(args[0], "portforward.k8s.io")
	if sc == nil {
		fmt.Printf("HTTP %d\n", resp.StatusCode)
		os.Exit(98)
	}
	results := make([]string, *n)
	var wg sync.WaitGroup
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			h := http.Header{}
			h.Set("streamType", "error")
			h.Set("port", args[1])
			h.Set("requestID", fmt.Sprint(i))
			es, err := tryStream(sc, h)
			var ds *spdystream.Stream
			if err == nil {
				h.Set("streamType", "data")
				ds, err = tryStream(sc, h)
			}
			if err == spdystream.ErrReset || (err != nil && strings.Contains(err.Error(), spdystream.ErrReset.Error())) {
				results[i] = "REFUSED"
				return
			} else if err != nil {
				fail("%v", err)
			}
			var emsg []byte
			done := make(chan struct{})
			go func() {
				emsg, _ = io.ReadAll(es)
				close(done)
			}()
			req := strings.ReplaceAll(*request, `\r\n`, "\r\n")
			ds.Write([]byte(req))
			time.Sleep(*hold)
			hash := sha256.New()
			var nb int64
			if *body {
				all, _ := io.ReadAll(ds)
				if i := strings.Index(string(all), "\r\n\r\n"); i >= 0 {
					all = all[i+4:]
				}
				hash.Write(all)
				nb = int64(len(all))
			} else if *doHash {
				nb, _ = io.Copy(hash, ds)
			} else {
				nb, _ = io.Copy(io.Discard, ds)
			}
			<-done
			if len(emsg) > 0 {
				results[i] = "ERROR " + string(emsg)
			} else if *doHash || *body {
				results[i] = fmt.Sprintf("%d %s", nb, hex.EncodeToString(hash.Sum(nil)))
			} else {
				results[i] = fmt.Sprintf("%d -", nb)
			}
			ds.Close()
		}(i)
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "ELAPSED %.6f\n", time.Since(t0).Seconds())
	for _, r := range results {
		fmt.Println(r)
	}
	sc.Close()
}

// execSession upgrades URL and creates the exec streams in kubectl's order
// (error, stdin, stdout, stderr), each waited for.
func execSession(raw, proto string, stdin bool) (net.Conn, map[string]*spdystream.Stream) {
	conn, s, _ := execSessionTimed(raw, proto, stdin)
	return conn, s
}

// execSessionTimed also returns when the upgrade was answered.
func execSessionTimed(raw, proto string, stdin bool) (net.Conn, map[string]*spdystream.Stream, time.Time) {
	sc, _, resp, conn := dialConn(raw, proto)
	upgraded := time.Now()
	if sc == nil {
		body, _ := io.ReadAll(resp.Body)
		fail("HTTP %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	streams := map[string]*spdystream.Stream{}
	types := []string{"error", "stdout", "stderr"}
	if stdin {
		types = []string{"error", "stdin", "stdout", "stderr"}
	}
	for _, t := range types {
		h := http.Header{}
		h.Set("streamType", t)
		streams[t] = stream(sc, h)
	}
	return conn, streams, upgraded
}

func execLoop(args []string) {
	fs := flag.NewFlagSet("execloop", flag.ExitOnError)
	proto := fs.String("proto", "v4.channel.k8s.io", "protocol offered")
	fs.Parse(args)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		t0 := time.Now()
		conn, s, upgraded := execSessionTimed(in.Text(), *proto, false)
		created := time.Now()
		var wg sync.WaitGroup
		for _, t := range []string{"stdout", "stderr"} {
			wg.Add(1)
			go func(st *spdystream.Stream) {
				defer wg.Done()
				io.Copy(io.Discard, st)
			}(s[t])
		}
		status, _ := io.ReadAll(s["error"])
		wg.Wait()
		us := time.Since(t0).Microseconds()
		conn.Close()
		st := strings.TrimSpace(string(status))
		if st == "" {
			st = "-"
		}
		fmt.Printf("%d %d %d %s\n", us, upgraded.Sub(t0).Microseconds(),
			created.Sub(upgraded).Microseconds(), strings.ReplaceAll(st, "\n", " "))
	}
}

func hold(args []string) {
	fs := flag.NewFlagSet("hold", flag.ExitOnError)
	proto := fs.String("proto", "v4.channel.k8s.io", "protocol offered")
	fs.Parse(args)
	in := bufio.NewReader(os.Stdin)
	var conns []net.Conn
	for {
		line, err := in.ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" {
			break
		}
		conn, s := execSession(line, *proto, true)
		for _, t := range []string{"stdout", "stderr", "error"} {
			go io.Copy(io.Discard, s[t])
		}
		conns = append(conns, conn)
		if err != nil {
			break
		}
	}
	fmt.Printf("ready %d\n", len(conns))
	io.Copy(io.Discard, in)
	for _, c := range conns {
		c.Close()
	}
}

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "execloop" {
		execLoop(os.Args[2:])
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "hold" {
		hold(os.Args[2:])
		return
	}
	if len(os.Args) < 3 {
		fail("usage: spdyclient exec|portforward|upgrade URL ...")
	}
	switch os.Args[1] {
	case "exec":
		exec(os.Args[2:])
	case "portforward":
		portforward(os.Args[2:])
	case "upgrade":
		fs := flag.NewFlagSet("upgrade", flag.ExitOnError)
		protos := fs.String("proto", "", "protocols offered")
		fs.Parse(os.Args[3:])
		sc, proto, resp := dial(os.Args[2], *protos)
		fmt.Printf("%d %s\n", resp.StatusCode, proto)
		if sc != nil {
			sc.Close()
		}
	default:
		fail("unknown mode %s", os.Args[1])
	}
}
