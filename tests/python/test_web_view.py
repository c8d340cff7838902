"""hai-web, the cluster's read-only web view, in a real browser: headless Chromium (Debian's
chromium and chromium-driver, driven by Selenium) against a running hai-server with two agents,
a 2-replica fs3 and hai-web, all real processes on loopback.

What a user sees is checked against what the CLI says (`hai ls --finished --json`, `hai show`,
`hai nodes --json`, `fs3 chains --json`): their jobs with states and why they wait, a job's runs,
exit codes, log tail and loss curve, nodes by zone and leaf, fs3's chains. Another user's job is
neither listed nor reachable by its address; no page offers an action; screenshots of every page
are saved (under $FF_BUILD_DIR/test-artifacts/web_view) and looked at: a real page, styled, not
blank and not an error.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib

import pytest
from fs3_cluster import Fs3Cluster
from hai_cluster import HaiCluster
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from ffdeploy.daemons import hai_web

HERE = os.path.dirname(os.path.abspath(__file__))

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Reports six losses and a learning rate (hai_job.report), prints a line to escape, then records
# steps (hai_job.record_steps) until stopped: 24 ms each, except that rank 1's data loading takes
# 0.1 s a step from its 30th on.
LOSS_JOB = (f"{sys.executable} -c 'import hai_job\n"
            "for i in range(1, 7): hai_job.report(i, loss=20 - 3 * i + 0.25, lr=1e-3 / i)\n"
            "print(\"step 6 reported\")'; "
            "echo 'done <for now> & waiting'; "
            f"exec {sys.executable} -c 'import hai_job, os, time\n"
            "hai_job.record_steps(optimizer_hook=False, data_loader=False)\n"
            "slow = os.environ[\"RANK\"] == \"1\"\n"
            "for i in range(1, 30000):\n"
            "    with hai_job.phase(\"data\"): time.sleep(0.1 if slow and i > 30 else 0.004)\n"
            "    time.sleep(0.02)\n"
            "    hai_job.step_done()'")
PLATFORM_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "platform", "python")


class Stack:
    pass


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    for binary in (CHROMIUM, CHROMEDRIVER):
        assert os.path.exists(binary), (f"{binary} is missing "
                                        "(deploy/install-deps.sh installs chromium and chromium-driver)")
    base = tmp_path_factory.mktemp("web")
    for d in ("fs3", "hai"):
        os.makedirs(base / d)
    s = Stack()
    with Fs3Cluster(str(base / "fs3"), storage=2, replication=2) as fs3, \
            HaiCluster(str(base / "hai"), nodes=2) as hai:
        s.fs3, s.hai = fs3, hai
        web = hai_web(hai.bin, hai.dir, hai.address, fs3_mgmtd=fs3.mgmtd)
        web.config["metrics"] = {"listen": "127.0.0.1:0"}
        try:
            s.url = "http://" + web.start().ready["http"]
            s.metrics = "http://" + web.ready["metrics"] + "/metrics"
            s.other = json.loads(hai.hai("admin", "user", "add", "other", "--json", token=hai.admin))["token"]
            s.running = int(hai.submit("--name", "lossy", "--nodes", "1", "--procs-per-node", "2",
                                       "--env", f"PYTHONPATH={PLATFORM_PYTHON}",
                                       "--", "sh", "-c", LOSS_JOB))
            s.done = int(hai.submit("--name", "quick", "--nodes", "1", "--", "true"))
            hai.wait_state(s.running, "RUNNING")
            hai.wait_state(s.done, "SUCCEEDED")
            hai.wait_log(s.running, "step 6 reported")
            s.theirs = int(json.loads(hai.hai("submit", "--json", "--name", "theirs", "--nodes", "1", "--",
                                          "sleep", "600", token=s.other))["id"])
            deadline = time.monotonic() + 60
            while json.loads(hai.hai("show", str(s.theirs), "--json", token=s.other))["state"] != "RUNNING":
                assert time.monotonic() < deadline, "the other user's job never started"
                time.sleep(0.2)
            # Both nodes busy: a 2-node job waits, with a reason.
            s.waiting = int(hai.submit("--name", "big", "--nodes", "2", "--", "true"))
            deadline = time.monotonic() + 30
            while not hai.show(s.waiting).get("pending_reason"):
                assert time.monotonic() < deadline, "the 2-node job has no pending reason"
                time.sleep(0.2)
            yield s
        finally:
            web.stop()
            for job, token in ((s.__dict__.get("theirs"), s.__dict__.get("other")),
                               (s.__dict__.get("running"), None), (s.__dict__.get("waiting"), None)):
                if job:
                    hai.hai("stop", str(job), token=token, check=False)


@pytest.fixture(scope="module")
def browser(stack):
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    os.environ.setdefault("SE_AVOID_STATS", "true")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def screenshots_dir():
    d = os.path.join(os.environ.get("FF_BUILD_DIR", "."), "test-artifacts", "web_view")
    os.makedirs(d, exist_ok=True)
    return d


def png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, unfiltered."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), f"PNG depth {depth} colour type {color}"
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def look_at(driver, name):
    """Saves a screenshot of the page and checks it is a page: big, styled (the navigation bar's
    dark blue across the top), with content (many colours, a good share of non-background)."""
    path = os.path.join(screenshots_dir(), f"{name}.png")
    assert driver.save_screenshot(path), f"no screenshot of {name}"
    assert os.path.getsize(path) > 8000, f"{path}: {os.path.getsize(path)} bytes, a blank page?"
    width, height, bpp, rows = png_pixels(path)
    assert width >= 1000 and height >= 600, (width, height)
    r, g, b = rows[5][10 * bpp:10 * bpp + 3]
    assert (r, g, b) == (0x1D, 0x2A, 0x44), f"{name}: no navigation bar at the top ({r}, {g}, {b})"
    colours, ink = set(), 0
    for y in range(0, height, 4):
        row = rows[y]
        for x in range(0, width, 4):
            px = row[x * bpp:x * bpp + 3]
            colours.add(px)
            ink += px != b"\xf6\xf7\xf9" and px != b"\xff\xff\xff"
    samples = (height // 4) * (width // 4)
    assert len(colours) > 20, f"{name}: {len(colours)} colours"
    assert ink / samples > 0.03, f"{name}: {ink / samples:.1%} of the page is not background"
    assert "Not found" not in driver.title and "Error" not in driver.title, driver.title
    return path


def login(driver, url, token, user=None):
    """Submits the login form and waits for its answer to load: with `user`, the jobs page naming
    that user; else the jobs page or the form again with an error. (A page asked for while the
    form's redirect is still under way would be replaced by it.)"""
    driver.get(url + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()

    def answered(d):
        if user is not None:
            names = d.find_elements(By.ID, "user")
            return bool(names) and names[0].text.split(" ")[0] == user
        return not d.current_url.endswith("/login") or d.find_elements(By.ID, "error")

    try:
        WebDriverWait(driver, 30).until(answered)
    except Exception:
        raise AssertionError(f"logging in as {user or 'someone'}: {driver.current_url} "
                             f"{driver.title}: {driver.page_source[-1500:]}") from None


def ids_and_states(driver):
    """The jobs a jobs page lists, with their states (waiting up to 10 s for its rows: every
    jobs page these tests open lists some)."""
    try:
        rows = WebDriverWait(driver, 10).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job]"))
    except Exception:
        raise AssertionError(f"no job rows on {driver.current_url} ({driver.title}): "
                             f"{driver.page_source[-2000:]}") from None
    return {int(r.get_attribute("data-job")):
            r.find_element(By.CSS_SELECTOR, "[data-state]").get_attribute("data-state") for r in rows}


def test_a_visitor_without_a_token_is_sent_to_log_in(stack, browser):
    browser.delete_all_cookies()
    browser.get(stack.url + "/")
    assert browser.current_url.endswith("/login")
    login(browser, stack.url, "hai_" + "0" * 64)
    assert "does not know that token" in browser.find_element(By.ID, "error").text
    browser.get(stack.url + f"/jobs/{stack.running}")
    assert browser.current_url.endswith("/login")


def test_jobs_page_shows_what_hai_ls_shows_and_nothing_more(stack, browser):
    login(browser, stack.url, stack.hai.token, "researcher")
    assert browser.current_url == stack.url + "/"
    assert browser.find_element(By.ID, "user").text == "researcher"
    listed = json.loads(stack.hai.hai("ls", "--finished", "--json"))
    listed = listed.get("jobs", listed) if isinstance(listed, dict) else listed
    assert ids_and_states(browser) == {int(j["id"]): j["state"] for j in listed}
    assert {stack.running, stack.done, stack.waiting} <= set(ids_and_states(browser))
    assert stack.theirs not in ids_and_states(browser)
    assert f"/jobs/{stack.theirs}\"" not in browser.page_source
    reason = stack.hai.show(stack.waiting)["pending_reason"]
    assert reason in browser.find_element(By.CSS_SELECTOR, f"tr[data-job='{stack.waiting}']").text
    assert not browser.find_elements(By.TAG_NAME, "form"), "a page offers an action"
    look_at(browser, "jobs")


def test_a_job_page_has_runs_exit_codes_log_and_reported_metrics(stack, browser):
    login(browser, stack.url, stack.hai.token, "researcher")
    shown = stack.hai.show(stack.running)
    browser.get(stack.url + f"/jobs/{stack.running}")
    facts = browser.find_element(By.ID, "facts").text
    assert "running" in facts and "researcher" in facts
    runs = browser.find_element(By.ID, "runs").text
    assert shown["runs"][0]["nodes"][0] in runs
    log = browser.find_element(By.ID, "log").text
    assert "step 6 reported" in log and "done <for now> & waiting" in log  # escaped, shown as is
    # What the job reported (hai_job.report), as `hai metrics` has it: one plot a metric, loss first.
    reported = json.loads(stack.hai.hai("metrics", str(stack.running), "--json"))
    assert [r["values"]["loss"] for r in reported["records"]] == [20 - 3 * i + 0.25 for i in range(1, 7)]
    figures = browser.find_elements(By.CSS_SELECTOR, "#metrics figure")
    assert [f.get_attribute("id") for f in figures] == ["metric-loss", "metric-lr"]
    curve = browser.find_element(By.CSS_SELECTOR, "#metric-loss svg polyline")
    assert len(curve.get_attribute("points").split()) == 6
    assert "loss: 6 points, step 1 to 6, last 2.25" in browser.find_element(By.ID, "metric-loss").text
    # Its steps (hai_job.record_steps): rank 1's data loading slowed, named as `hai top` names it,
    # each rank's last steps, and a plot of rank 1's step time and phases.
    deadline = time.monotonic() + 40
    while True:
        found = browser.find_elements(By.ID, "step-finding")
        if found and "data loading on" in found[0].text:
            break
        assert time.monotonic() < deadline, (found[0].text if found else "no Steps section",
                                             stack.hai.hai("top", str(stack.running)))
        time.sleep(1)
        browser.get(stack.url + f"/jobs/{stack.running}")
    top = json.loads(stack.hai.hai("top", str(stack.running), "--json"))
    assert top["finding"]["cause"] == "SLOW_DATA" and top["finding"]["rank"] == 1, top
    assert top["finding"]["node"] in found[0].text
    rows = browser.find_elements(By.CSS_SELECTOR, "#step-ranks tbody tr")
    assert len(rows) == 2 and all(top["finding"]["node"] in r.text for r in rows)
    lines = browser.find_elements(By.CSS_SELECTOR, "#step-plot svg polyline")
    titles = [line.find_element(By.TAG_NAME, "title").get_attribute("textContent") for line in lines]
    assert titles[0] == "step_s" and "data_s" in titles, titles
    assert "rank 1 (the latest)" in browser.find_element(By.ID, "step-plot").text
    look_at(browser, "job_running")

    browser.get(stack.url + f"/jobs/{stack.done}")
    assert "succeeded" in browser.find_element(By.ID, "facts").text
    assert "0: 0" in browser.find_element(By.ID, "runs").text  # rank 0 exited 0
    look_at(browser, "job_succeeded")

    browser.get(stack.url + f"/jobs/{stack.waiting}")
    assert stack.hai.show(stack.waiting)["pending_reason"] in browser.find_element(By.ID, "pending").text


def test_another_users_job_is_not_reachable(stack, browser):
    login(browser, stack.url, stack.hai.token, "researcher")
    browser.get(stack.url + f"/jobs/{stack.theirs}")
    assert browser.title.startswith("Not found")
    assert "sleep 600" not in browser.page_source and "theirs" not in browser.page_source
    # The same answer as for a job that does not exist: the page does not tell them apart.
    browser.get(stack.url + "/jobs/999999")
    assert browser.find_element(By.ID, "error").text == "You have no job 999999."


def test_nodes_page_draws_zones_leaves_and_who_runs_where(stack, browser):
    login(browser, stack.url, stack.hai.token, "researcher")
    browser.get(stack.url + "/nodes")
    nodes = json.loads(stack.hai.hai("nodes", "--json"))
    nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
    for n in nodes:
        card = browser.find_element(
            By.CSS_SELECTOR, f"section[data-zone='{n['zone']}'] div[data-leaf='{n['leaf']}'] "
                             f"div[data-node='{n['name']}']")
        assert "up" in card.text
        mine = [int(j) for j in n.get("jobs", []) if int(j) != stack.theirs]
        for j in mine:
            assert card.find_element(By.LINK_TEXT, str(j))
        if stack.theirs in [int(j) for j in n.get("jobs", [])]:
            assert "1 other user's job" in card.text and str(stack.theirs) not in card.text
    assert f"{len(nodes)} nodes: {len(nodes)} up" in browser.find_element(By.ID, "summary").text
    look_at(browser, "nodes")


def test_fs3_page_lists_the_chains_fs3_lists(stack, browser):
    login(browser, stack.url, stack.hai.token, "researcher")
    browser.get(stack.url + "/fs3")
    chains = json.loads(subprocess.run(
        [os.path.join(stack.fs3.bin, "fs3"), "--mgmtd", stack.fs3.mgmtd, "chains", "--json"],
        capture_output=True, text=True, check=True).stdout)
    assert chains
    for c in chains:
        row = browser.find_element(By.CSS_SELECTOR, f"tr[data-chain='{c['id']}']")
        shown = [int(t.get_attribute("data-target")) for t in row.find_elements(By.CSS_SELECTOR, "[data-target]")]
        assert shown == [int(t["target"]) for t in c["targets"]]  # head first
        for t in c["targets"]:
            assert t["state"] in row.text
    look_at(browser, "fs3")


def test_admin_may_see_every_users_jobs_and_logout_forgets_the_token(stack, browser):
    login(browser, stack.url, stack.hai.admin, "admin")
    browser.get(stack.url + "/?all=1")
    assert stack.theirs in ids_and_states(browser), (browser.current_url, browser.title)
    browser.get(stack.url + "/logout")
    assert browser.current_url.endswith("/login")
    browser.get(stack.url + "/")
    assert browser.current_url.endswith("/login")


def test_nothing_changes_state_through_the_view(stack):
    """Only GET pages and the login form: any other request is refused, and the job runs on."""
    for method, path in (("POST", f"/jobs/{stack.running}"), ("DELETE", f"/jobs/{stack.running}"),
                         ("POST", "/"), ("PUT", "/nodes")):
        req = urllib.request.Request(stack.url + path, method=method, data=b"stop=1",
                                     headers={"Cookie": f"hai_token={stack.hai.token}"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code in (404, 405), (method, path, e.value.code)
    assert stack.hai.show(stack.running)["state"] == "RUNNING"


def test_served_over_https_the_login_cookie_is_secure(stack, tmp_path):
    """hai-web with https_cert_file: pages over TLS (checked against the certificate's
    authority), the login cookie Secure, HSTS; plain HTTP on that port gets no page."""
    import http.client
    import ssl
    certs = tmp_path / "tls"
    subprocess.run(["bash", os.path.join(HERE, "..", "..", "deploy", "make-certs.sh"), str(certs),
                    "web=127.0.0.1"], check=True, capture_output=True)
    hai = stack.hai
    web = hai_web(hai.bin, str(tmp_path), hai.address, name="web-https",
                  https_cert_file=str(certs / "web.pem"), https_key_file=str(certs / "web.key"))
    try:
        url = web.start().ready["url"]
        assert url.startswith("https://"), url
        host, port = web.ready["http"].rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))

        def request(method, path, body=None, cookie=None):
            c = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
            headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
            if cookie:
                headers["Cookie"] = cookie
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            return r.status, dict(r.getheaders()), r.read().decode()

        status, headers, _ = request("GET", "/")
        assert status == 303 and headers["Location"] == "/login", (status, headers)
        assert headers["Strict-Transport-Security"].startswith("max-age=")
        status, headers, _ = request("POST", "/login",
                                     body=urllib.parse.urlencode({"token": hai.token}))
        assert status == 303, status
        cookie = headers["Set-Cookie"]
        assert "; Secure" in cookie and "HttpOnly" in cookie, cookie
        status, _, page = request("GET", "/", cookie=cookie.split(";")[0])
        assert status == 200 and "lossy" in page, status
        # Plain HTTP to the HTTPS port: no page.
        try:
            c = http.client.HTTPConnection(host, int(port), timeout=10)
            c.request("GET", "/login")
            plain = c.getresponse().status
        except (OSError, http.client.HTTPException):
            plain = None
        assert plain != 200
        # Another authority's client does not trust it.
        with pytest.raises(ssl.SSLError):
            other = ssl.create_default_context()
            http.client.HTTPSConnection(host, int(port), context=other, timeout=10).request("GET", "/")
    finally:
        web.stop()


def test_zz_metrics_count_what_was_served(stack):
    """(Runs last.) hai-web's /metrics counted the pages above by route, not by job id."""
    text = urllib.request.urlopen(stack.metrics, timeout=10).read().decode()

    def value(name, **labels):
        for line in text.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    assert value("hai_web_requests_total", page="job", code="404") >= 2  # theirs, and 999999
    assert value("hai_web_requests_total", page="job", code="200") >= 3
    assert value("hai_web_requests_total", page="nodes", code="200") >= 1
    assert value("hai_web_logins_total", result="refused") >= 1
    assert value("hai_web_logins_total", result="ok") >= 5
    assert value("hai_web_request_seconds_count", page="fs3") >= 1
    assert "/jobs/" not in text  # routes, not paths: no job ids as labels
