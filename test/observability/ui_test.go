package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color/palette"
	"image/draw"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/test/testutil"
)

var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// chromium runs one headless Chromium command against the page and returns
// its standard output. Each run gets its own profile directory. Every
// non-loopback request goes to proxy (loopback ones go direct, Chromium's
// default), a local recorder that answers 403: the browser's own background
// requests (update checks, network time) never leave the machine.
func chromium(t *testing.T, bin, proxy string, args ...string) (string, error) {
	t.Helper()
	all := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
		"--disable-background-networking", "--disable-component-update", "--disable-default-apps",
		"--user-data-dir=" + t.TempDir(), "--proxy-server=" + proxy,
	}, args...)
	cmd := exec.Command(bin, all...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(45 * time.Second):
		err = fmt.Errorf("chromium did not finish within 45s")
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // helpers left in the group
	if err != nil {
		e := errOut.String()
		if len(e) > 2000 {
			e = e[len(e)-2000:]
		}
		return out.String(), fmt.Errorf("%w: %s", err, e)
	}
	return out.String(), nil
}

// recorder is an HTTP proxy that only records what reaches it and refuses
// it.
type recorder struct {
	mu   sync.Mutex
	reqs []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Method+" "+req.Host+req.URL.Path)
	r.mu.Unlock()
	http.Error(w, "external requests are not allowed in this test", http.StatusForbidden)
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reqs...)
}

var (
	nodeRowRE  = regexp.MustCompile(`<tr data-node="([^"]+)"`)
	graphNode  = regexp.MustCompile(`<g data-node="([^"]+)"`)
	edgeRowRE  = regexp.MustCompile(`<tr data-from="([^"]+)" data-to="([^"]+)" data-total="(\d+)"`)
	arrowRE    = regexp.MustCompile(`<path [^>]*data-from="([^"]+)" data-to="([^"]+)" data-rate="([0-9.]+)" data-total="(\d+)"`)
	counterRE  = regexp.MustCompile(`<tr><td>((?:requests|rejections)/[a-z_]+)</td><td>(\d+)</td></tr>`)
	metricLine = regexp.MustCompile(`^swd_transfers_total\{direction="out",outcome="ok",peer="([^"]+)"\} (\S+)$`)
)

// page is what a DOM dump of the status page shows.
type page struct {
	rows   []string           // the nodes table, by node
	graph  []string           // the graph's nodes
	edges  map[string]uint64  // the flows table: "from>to" -> total
	arrows map[string]float64 // the graph's arrows: "from>to" -> transfers/s
	counts map[string]uint64  // this node's counters table
}

func parsePage(dom string) page {
	p := page{edges: map[string]uint64{}, arrows: map[string]float64{}, counts: map[string]uint64{}}
	for _, m := range nodeRowRE.FindAllStringSubmatch(dom, -1) {
		p.rows = append(p.rows, m[1])
	}
	for _, m := range graphNode.FindAllStringSubmatch(dom, -1) {
		p.graph = append(p.graph, m[1])
	}
	for _, m := range edgeRowRE.FindAllStringSubmatch(dom, -1) {
		v, _ := strconv.ParseUint(m[3], 10, 64)
		p.edges[m[1]+">"+m[2]] = v
	}
	for _, m := range arrowRE.FindAllStringSubmatch(dom, -1) {
		v, _ := strconv.ParseFloat(m[3], 64)
		p.arrows[m[1]+">"+m[2]] = v
	}
	for _, m := range counterRE.FindAllStringSubmatch(dom, -1) {
		v, _ := strconv.ParseUint(m[2], 10, 64)
		p.counts[m[1]] = v
	}
	return p
}

// scrapeOK reads one node's /metrics and returns its successful outgoing
// transfers per peer ("from>peer" -> count, zeros left out), and its
// request and rejection counters keyed as the page keys them.
func scrapeOK(t *testing.T, admin, from string) (map[string]uint64, map[string]uint64) {
	t.Helper()
	code, _, body := httpGetBody(t, "http://"+admin+"/metrics")
	require.Equal(t, http.StatusOK, code)
	edges, counts := map[string]uint64{}, map[string]uint64{}
	for _, line := range strings.Split(body, "\n") {
		if m := metricLine.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err)
			if v > 0 {
				edges[from+">"+m[1]] = uint64(v)
			}
		}
		for _, fam := range []struct{ name, label, key string }{{"swd_requests_total", "outcome", "requests/"}, {"swd_rejections_total", "reason", "rejections/"}} {
			if rest, ok := strings.CutPrefix(line, fam.name+"{"+fam.label+`="`); ok {
				name, val, _ := strings.Cut(rest, `"} `)
				v, err := strconv.ParseFloat(val, 64)
				require.NoError(t, err)
				if v > 0 {
					counts[fam.key+name] = uint64(v)
				}
			}
		}
	}
	return edges, counts
}

// The status page on the admin port, in a real headless Chromium against
// a running 4-node cluster: before any request it draws all four nodes;
// under load to node-0 (which moves requests to the others) it draws
// arrows from node-0 with a positive rate; its screenshot shows the graph
// and the charts in every node's colour; once the load stopped, every flow
// total and counter it shows equals what the nodes' /metrics say; and it
// loads nothing from outside. UPDATE_SCREENSHOT=1 also writes the
// screenshot (reduced to 256 colours) to docs/img/ui.png.
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping end-to-end test in -short mode")
	}
	bin := ensureTool(t, "ensure-chromium.sh", chromiumNames...)
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "nu"; cfg.Concurrency = 1 })
	rec := &recorder{}
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	url := "http://" + c.Info.Nodes[0].Admin + "/ui"
	want := []string{"node-0", "node-1", "node-2", "node-3"}

	// dump polls the page's DOM until ok accepts it.
	dump := func(what string, ok func(page) bool) page {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var last page
		for {
			dom, err := chromium(t, bin, proxy.URL, "--virtual-time-budget=2500", "--dump-dom", url)
			require.NoError(t, err)
			require.Contains(t, dom, "SWD cluster", "not the status page")
			last = parsePage(dom)
			if ok(last) {
				return last
			}
			if time.Now().After(deadline) {
				t.Fatalf("status page never showed %s within 60s; last: %+v", what, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Run("fresh cluster", func(t *testing.T) {
		// Before any request the page already draws and lists every node.
		p := dump("all four nodes", func(p page) bool { return len(p.rows) == 4 && len(p.graph) == 4 })
		assert.ElementsMatch(t, want, p.rows)
		assert.ElementsMatch(t, want, p.graph)
		assert.Empty(t, p.arrows, "nothing moves yet")
		assert.Empty(t, p.edges, "no transfer yet")
	})

	// Load: requests to node-0 under nu (25 ms each, 100/s on m = 1), so it
	// transfers to the others and the page has flows to draw. For the
	// docs' screenshot the load runs longer, and node-1 gets a second
	// stream for a while, so the charts have something to show.
	docs := os.Getenv("UPDATE_SCREENSHOT") == "1"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent atomic.Int64 // to node-0
	hc := newClient()
	load := func(node int, every time.Duration, from, until time.Duration, bound int64, count *atomic.Int64) {
		defer wg.Done()
		begin := time.Now()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			el := time.Since(begin)
			if el < from {
				continue
			}
			if el > until || count.Load() >= bound { // bounded, whatever happens
				return
			}
			count.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				get(context.Background(), hc, "http://"+c.Info.Nodes[node].HTTP+"/work?ms=25")
			}()
		}
	}
	bound := int64(3000)
	if docs {
		bound = 8000
		var other atomic.Int64
		wg.Add(1)
		go load(1, 20*time.Millisecond, 12*time.Second, time.Minute, 3000, &other)
	}
	wg.Add(1)
	go load(0, 10*time.Millisecond, 0, time.Hour, bound, &sent)
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	p := dump("arrows from node-0 under load", func(p page) bool {
		for k, v := range p.arrows {
			if strings.HasPrefix(k, "node-0>") && v > 0 {
				return true
			}
		}
		return false
	})
	for k, v := range p.arrows {
		from, to, _ := strings.Cut(k, ">")
		assert.Contains(t, want, from, "arrow %s", k)
		assert.Contains(t, want, to, "arrow %s", k)
		assert.NotEqual(t, from, to, "arrow %s", k)
		assert.Positive(t, v, "an arrow is drawn only for a current flow: %s", k)
	}

	// The screenshot, under load: 1200x800, with the graph's node circles
	// and the chart lines in each node's colour.
	if docs {
		time.Sleep(28 * time.Second) // a picture with history, not a test condition
	}
	shot := filepath.Join(t.TempDir(), "ui.png")
	netlog := filepath.Join(t.TempDir(), "netlog.json")
	_, err := chromium(t, bin, proxy.URL, "--virtual-time-budget=3000", "--hide-scrollbars",
		"--window-size=1200,800", "--screenshot="+shot, "--log-net-log="+netlog, url)
	require.NoError(t, err)
	b, err := os.ReadFile(shot)
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Equal(t, image.Rect(0, 0, 1200, 800), img.Bounds())
	// node-0 #2563eb, node-1 #dc2626, node-2 #16a34a, node-3 #9333ea.
	for i, c := range [][3]uint8{{0x25, 0x63, 0xeb}, {0xdc, 0x26, 0x26}, {0x16, 0xa3, 0x4a}, {0x93, 0x33, 0xea}} {
		n := countColor(img, c[0], c[1], c[2])
		t.Logf("node-%d colour: %d pixels", i, n)
		assert.Greater(t, n, 800, "node-%d's circle (and chart lines) missing from the screenshot", i)
	}
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		dst := filepath.Join(testutil.RepoRoot(), "docs", "img", "ui.png")
		small := paletted(t, img)
		require.Less(t, len(small), 150<<10, "docs/img/ui.png must stay under 150 KB")
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(t, os.WriteFile(dst, small, 0o644))
		t.Logf("wrote %s (%d bytes)", dst, len(small))
	}

	// Nothing went outside: Chromium's network log shows every request the
	// page initiated, and all were to its own origin; it polled its state.
	origin := "http://" + c.Info.Nodes[0].Admin
	byPage := pageRequests(t, netlog, origin)
	t.Logf("requests the page made: %v; browser background requests (refused by the recorder): %v", byPage, rec.seen())
	polled := false
	for _, u := range byPage {
		assert.True(t, strings.HasPrefix(u, origin+"/"), "the status page requested %s, outside its origin", u)
		polled = polled || strings.HasPrefix(u, origin+"/ui/state")
	}
	assert.True(t, polled, "the page never polled /ui/state: %v", byPage)

	// The numbers on the page are /metrics' numbers: once the load stopped
	// and the cluster is idle, every flow total on the page (each sender's
	// swd_transfers_total{direction="out",outcome="ok"}) and node-0's
	// request counters equal a scrape of the nodes.
	stopLoad()
	var wantEdges, wantCounts map[string]uint64
	require.Eventually(t, func() bool {
		edges, counts := map[string]uint64{}, map[string]uint64{}
		for _, n := range c.Info.Nodes {
			e, k := scrapeOK(t, n.Admin, n.Name)
			for key, v := range e {
				edges[key] = v
			}
			if n.Name == "node-0" {
				counts = k
			}
		}
		settled := wantEdges != nil && assert.ObjectsAreEqual(edges, wantEdges) && assert.ObjectsAreEqual(counts, wantCounts)
		wantEdges, wantCounts = edges, counts
		return settled
	}, 60*time.Second, time.Second, "the cluster never went idle after the load")
	require.NotEmpty(t, wantEdges, "node-0 moved nothing under load")
	p = dump("the flow totals of /metrics", func(p page) bool { return assert.ObjectsAreEqual(wantEdges, p.edges) })
	assert.Equal(t, wantEdges, p.edges, "flows table vs swd_transfers_total")
	assert.Equal(t, wantCounts, p.counts, "node-0's counters vs swd_requests_total and swd_rejections_total")
	var answered uint64
	for k, v := range wantCounts {
		if strings.HasPrefix(k, "requests/") {
			answered += v
		}
	}
	assert.EqualValues(t, sent.Load(), answered, "node-0 counted every request sent to it once")
}

// paletted re-encodes a screenshot with 256 colours (Plan 9's palette,
// nearest colour, no dithering): the page's flat colours survive and the
// file shrinks to about a third.
func paletted(t *testing.T, img image.Image) []byte {
	t.Helper()
	p := image.NewPaletted(img.Bounds(), palette.Plan9)
	draw.Src.Draw(p, img.Bounds(), img, image.Point{})
	var b bytes.Buffer
	require.NoError(t, (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, p))
	return b.Bytes()
}

// pageRequests reads a Chromium NetLog and returns the distinct URLs of the
// requests that origin's page initiated.
func pageRequests(t *testing.T, path, origin string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var nl struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
		} `json:"constants"`
		Events []struct {
			Type   int            `json:"type"`
			Params map[string]any `json:"params"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(b, &nl), "chromium's net log")
	start, ok := nl.Constants.LogEventTypes["URL_REQUEST_START_JOB"]
	require.True(t, ok, "net log has no URL_REQUEST_START_JOB event type")
	seen := map[string]bool{}
	var out []string
	total := 0
	for _, e := range nl.Events {
		if e.Type != start {
			continue
		}
		total++
		u, _ := e.Params["url"].(string)
		if in, _ := e.Params["initiator"].(string); in == origin && !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	require.Positive(t, total, "net log recorded no request")
	return out
}

func countColor(img image.Image, r, g, b uint8) int {
	n := 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if uint8(pr>>8) == r && uint8(pg>>8) == g && uint8(pb>>8) == b {
				n++
			}
		}
	}
	return n
}

var urlRE = regexp.MustCompile(`(?i)(?:https?:)?//[a-z0-9.-]+[^\s"'<>)]*`)

var scriptRE = regexp.MustCompile(`(?i)<script[^>]*\ssrc="([^"]*)"`)

// The status page references nothing outside its own origin: its HTML has
// no absolute or protocol-relative URL in src, href, url(), @import; its
// scripts are files of its own origin under /ui/ (no inline script, which
// the Content-Security-Policy forbids), served as JavaScript; the page's
// own script names no other origin; the embedded charting library's only
// absolute URLs are its licence header and readme link, never fetched
// (TestStatusPageInChromium's network log shows what the page requests).
// The only other absolute URLs are the SVG and XHTML namespace names.
func TestStatusPageHasNoExternalReferences(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping end-to-end test in -short mode")
	}
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 1 })
	base := "http://" + c.Info.Nodes[0].Admin
	code, hdr, html := httpGetBody(t, base+"/ui")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, hdr.Get("Content-Type"), "text/html")
	csp := hdr.Get("Content-Security-Policy")
	assert.Contains(t, csp, "default-src 'self'", "CSP %q", csp)
	assert.Contains(t, csp, "script-src 'self'", "CSP %q", csp)
	for _, d := range strings.Split(csp, ";") {
		assert.NotRegexp(t, `https?:|\*`, d, "CSP directive %q allows other origins", d)
		if strings.HasPrefix(strings.TrimSpace(d), "script-src") {
			assert.NotContains(t, d, "unsafe-inline", "inline scripts allowed")
		}
	}
	namespaces := map[string]bool{"http://www.w3.org/2000/svg": true, "http://www.w3.org/1999/xhtml": true}
	checkURLs := func(what, text string, allowed map[string]bool) {
		for _, u := range urlRE.FindAllString(text, -1) {
			if strings.HasPrefix(u, "//") && !strings.Contains(u, ".") {
				continue // a JS comment, not a URL
			}
			assert.True(t, allowed[u], "%s references %s", what, u)
		}
	}
	checkURLs("the page", html, namespaces)
	for _, pat := range []string{`(?i)<link[^>]+href=`, `(?i)<img[^>]+src=`, `(?i)@import`, `(?i)<iframe`, `(?i)<script>`} {
		assert.NotRegexp(t, pat, html)
	}
	scripts := scriptRE.FindAllStringSubmatch(html, -1)
	require.Len(t, scripts, 2, "the charting library and the page's script")
	library := map[string]bool{"https://www.chartjs.org": true, "https://github.com/kurkle/color#readme": true}
	for _, m := range scripts {
		src := m[1]
		require.True(t, strings.HasPrefix(src, "/ui/") && !strings.Contains(src, "//"), "script %q is not a file of this origin", src)
		code, hdr, js := httpGetBody(t, base+src)
		require.Equal(t, http.StatusOK, code, src)
		assert.Contains(t, hdr.Get("Content-Type"), "javascript", src)
		assert.Less(t, len(js), 300<<10, "%s: embedded scripts stay small", src)
		if src == "/ui/ui.js" {
			checkURLs(src, js, namespaces)
			// The page polls its own state with a relative URL.
			assert.Contains(t, js, `fetch("/ui/state`)
		} else {
			checkURLs(src, js, library)
			assert.Contains(t, js, "Released under the MIT License", "the library keeps its licence header")
		}
	}
	code, _, _ = httpGetBody(t, base+"/ui/nothing.js")
	assert.Equal(t, http.StatusNotFound, code, "only the embedded assets are served")
	code, hdr, state := httpGetBody(t, base+"/ui/state")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, hdr.Get("Content-Type"), "application/json")
	var s map[string]any
	require.NoError(t, json.Unmarshal([]byte(state), &s))
	assert.Equal(t, "node-0", s["node"])
	code, _, _ = httpGetBody(t, base+"/ui/state?since=yesterday")
	assert.Equal(t, http.StatusBadRequest, code)
}
