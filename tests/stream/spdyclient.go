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
//	spdyclient proxypf URL PORT -down N | -up N
//	    port-forward as it reaches a runtime in a cluster: spdystream on the
//	    bare TCP connection (no read buffer, as client-go's SpdyRoundTripper
//	    hands it over), through a hop that copies raw bytes both ways with
//	    32 KiB reads (kubelet's UpgradeAwareHandler), the data stream joined
//	    to a local TCP connection with io.Copy (kubectl). A local client
//	    reads N bytes from the pod (-down) or sends N and reads the pod's
//	    answer line (-up); prints "<bytes> <seconds>" then the answer.
//	    On stderr: "STATS ..." the reads of the hop and of the stream.
//	    -tls: TLS between the hop and spdystream, as between kubelet and
//	    the API server.
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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/big"
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

// dialVia is dialConn that dials addr (a hop) instead of the URL's host,
// and gives spdystream the bare connection, as client-go does.
var dialVia string

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
		host := u.Host
		if dialVia != "" {
			host = dialVia
		}
		conn, err = net.DialTimeout("tcp", host, 10*time.Second)
		if err != nil {
			fail("dial: %v", err)
		}
		if hopTLS {
			conn = tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
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
	var sconn net.Conn = &bufConn{conn, br}
	if dialVia != "" {
		if br.Buffered() > 0 {
			fail("bytes after the 101 response")
		}
		sconn = conn
	}
	sc, err := spdystream.NewConnection(sconn, false)
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

// readerOnly and writerOnly hide ReadFrom/WriteTo, so io.CopyBuffer
// really copies through its buffer (Go splices TCP to TCP otherwise; the
// kubelet's hop writes to a TLS connection, which cannot).
type readerOnly struct{ io.Reader }
type writerOnly struct{ io.Writer }

// counted counts the reads of a reader, for the stats line.
type counted struct {
	io.Reader
	reads, bytes *int64
}

func (c counted) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	if n > 0 {
		*c.reads++
		*c.bytes += int64(n)
	}
	return n, err
}

var hopReads, hopBytes, dataReads, dataBytes int64

// hopTLS: the hop's client side is TLS, as kubelet's server is to the API
// server (a throwaway self-signed certificate).
var hopTLS bool

func selfSigned() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		fail("key: %v", err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		fail("certificate: %v", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// hop accepts one connection on l and joins it to addr, 32 KiB at a time.
func hop(l net.Listener, addr string) {
	in, err := l.Accept()
	if err != nil {
		fail("hop accept: %v", err)
	}
	if hopTLS {
		in = tls.Server(in, &tls.Config{Certificates: []tls.Certificate{selfSigned()}})
	}
	out, err := net.Dial("tcp", addr)
	if err != nil {
		fail("hop dial: %v", err)
	}
	cp := func(dst net.Conn, src io.Reader) {
		io.CopyBuffer(writerOnly{dst}, readerOnly{src}, make([]byte, 32<<10))
		if t, ok := dst.(interface{ CloseWrite() error }); ok {
			t.CloseWrite()
		}
	}
	go cp(out, in)
	go cp(in, counted{out, &hopReads, &hopBytes})
}

func proxyPF(args []string) {
	fs := flag.NewFlagSet("proxypf", flag.ExitOnError)
	down := fs.Int64("down", 0, "bytes to read from the pod")
	up := fs.Int64("up", 0, "bytes to send to the pod")
	fs.BoolVar(&hopTLS, "tls", false, "TLS between the hop and us")
	fs.Parse(args[2:])
	u, err := url.Parse(args[0])
	if err != nil {
		fail("url: %v", err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	go hop(hl, u.Host)
	dialVia = hl.Addr().String()
	sc, _, resp := dial(args[0], "portforward.k8s.io")
	if sc == nil {
		fmt.Printf("HTTP %d\n", resp.StatusCode)
		os.Exit(98)
	}
	h := http.Header{}
	h.Set("streamType", "error")
	h.Set("port", args[1])
	h.Set("requestID", "0")
	es := stream(sc, h)
	h.Set("streamType", "data")
	ds := stream(sc, h)
	go func() {
		if msg, _ := io.ReadAll(es); len(msg) > 0 {
			fail("error stream: %s", msg)
		}
	}()
	// kubectl's side: the local port
	ll, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	go func() {
		conn, err := ll.Accept()
		if err != nil {
			fail("accept: %v", err)
		}
		go func() {
			io.Copy(conn, counted{ds, &dataReads, &dataBytes})
			conn.(*net.TCPConn).CloseWrite()
		}()
		go func() {
			io.Copy(ds, conn)
			ds.Close()
		}()
	}()
	// the user's client
	lc, err := net.Dial("tcp", ll.Addr().String())
	if err != nil {
		fail("dial local: %v", err)
	}
	t0 := time.Now()
	var n int64
	answer := ""
	if *up > 0 {
		chunk := make([]byte, 32<<10)
		for n < *up {
			k := int64(len(chunk))
			if *up-n < k {
				k = *up - n
			}
			w, err := lc.Write(chunk[:k])
			n += int64(w)
			if err != nil {
				fail("write: %v", err)
			}
		}
		// the answer comes once the pod has all (the half-close is not
		// passed on by every runtime)
		b, _ := bufio.NewReader(lc).ReadString('\n')
		answer = strings.TrimSpace(b)
	} else {
		n, _ = io.Copy(io.Discard, lc)
		if n != *down {
			fail("read %d of %d bytes", n, *down)
		}
	}
	fmt.Printf("%d %.6f\n%s\n", n, time.Since(t0).Seconds(), answer)
	// racy reads of the counters, good enough for a look
	fmt.Fprintf(os.Stderr, "STATS hop reads from the runtime %d (%d B each), stream reads %d (%d B each)\n",
		hopReads, hopBytes/(hopReads+1), dataReads, dataBytes/(dataReads+1))
	lc.Close()
	sc.Close()
}

func main() {
	if len(os.Args) >= 4 && os.Args[1] == "proxypf" {
		proxyPF(os.Args[2:])
		return
	}
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
