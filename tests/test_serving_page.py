"""Tests for tetra_tf/serving/page.py: the parse page, its drawings, and the page in a real
browser (headless Chromium driven by selenium), against serving/server.py."""

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree

import pytest

for _module in ("waitress", "grpc", "tensorflow_serving"):
    pytest.importorskip(_module, reason="needs the 'serving' extra: pip install -e "
                        "'.[serving]'")

from conftest import REPO_ROOT, free_port, served_until_done, subprocess_env  # noqa: E402
from tetra_tf.contract import text as text_lib
from tetra_tf.serving import page  # noqa: E402
from tetra_tf.serving.errors import RequestError  # noqa: E402
from tetra_tf.trees import drawing  # noqa: E402
from tetra_tf.trees import treebank

SERVER_SCRIPT = os.path.join(REPO_ROOT, "serving", "server.py")
MODEL_NAME = "tetra"
MAX_WORDS = 30
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SVG = "{http://www.w3.org/2000/svg}"
TYPED = ("The cat sat on the mat. It saw <script>alert(1)</script> and <b>bold</b> "
         "&amp; more.")


def _word_texts(svg: str, *kinds: str) -> list[str]:
    return [element.text for element in ElementTree.fromstring(svg).iter(f"{SVG}text")
            if element.get("class") in kinds]


def test_draw_json_draws_each_tree_with_its_words_and_probabilities():
    answer = page.draw_json(json.dumps({
        "trees": ["(TOP (S (NP (DT a)) (VP (VB b))))", "(TOP (X (Y c)))"],
        "words": [["<b>", "&amp;"], None],
        "probabilities": [[0.5, 0.25, 0.125], None]}).encode())
    first, second = answer["svgs"]
    assert _word_texts(first, drawing.WORD) == ["<b>", "&amp;"]
    assert _word_texts(first, drawing.PROBABILITY) == ["0.50", "0.25", "0.12"]
    assert _word_texts(second, drawing.LABEL, drawing.POS, drawing.WORD) == [
        "TOP", "X", "Y", "c"]
    assert page.draw_json(b'{"trees": []}') == {"svgs": []}


@pytest.mark.parametrize("body, message", [
    (b"not json", "not JSON"),
    (b'{"trees": "(TOP (X a))"}', "'trees' must be a list"),
    (b'{"trees": ["(TOP (X a))"], "words": [["a", "b"]]}', "tree 0: 2 words"),
    (b'{"trees": ["(TOP (X a))"], "words": []}', "'words' must be a list with one entry"),
    (b'{"trees": ["(TOP (X a))"], "probabilities": [["x"]]}', "'probabilities' must be"),
    (b'{"trees": ["(TOP (X a)"]}', "tree 0: "),
    (json.dumps({"trees": ["(TOP (X a))"] * (page.MAX_DRAW_TREES + 1)}).encode(),
     f"at most {page.MAX_DRAW_TREES}"),
    (json.dumps({"trees": ["(TOP (X " + " ".join(["(Y a)"] * (page.MAX_DRAW_LEAVES + 1))
                           + "))"]}).encode(), f"more than {page.MAX_DRAW_LEAVES} words"),
])
def test_a_bad_drawing_request_is_a_400_naming_what_is_wrong(body, message):
    with pytest.raises(RequestError, match=message) as raised:
        page.draw_json(body)
    assert raised.value.status == 400


def test_the_page_names_the_served_models_as_escaped_text():
    parse_page = page.ParsePage(lambda: ['m"><script>x</script>', "tetra"])
    status, body, content_type, headers = parse_page.answer("GET", "/", lambda: b"")
    assert status == 200 and content_type.startswith("text/html")
    text = body.decode()
    assert "<script>x</script>" not in text and "&lt;script&gt;" in text
    assert dict(headers)["Content-Security-Policy"].startswith("default-src 'none'; "
                                                               "script-src 'self';")
    assert parse_page.answer("GET", "/v1/models/tetra", lambda: b"") is None
    for path in page.ASSETS:
        assert parse_page.answer("GET", path, lambda: b"")[0] == 200
    with pytest.raises(RequestError) as raised:
        parse_page.answer("GET", page.DRAW_PATH, lambda: b"")
    assert raised.value.status == 405


# --- The page in a real browser -----------------------------------------------------------


@pytest.fixture(scope="module")
def page_server(tiny_export_dir, tmp_path_factory):
    """serving/server.py with --parse_page on the tiny export: yields its REST port."""
    port = free_port()
    log_path = str(tmp_path_factory.mktemp("page_server") / "server.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, SERVER_SCRIPT,
             f"--model_base_path={os.path.dirname(tiny_export_dir)}",
             f"--model_name={MODEL_NAME}", f"--rest_api_port={port}",
             f"--port={free_port()}", "--parse_page",
             f"--max_words_per_sentence={MAX_WORDS}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=subprocess_env())
    with served_until_done(process, port, log_path):
        yield port


def test_the_page_is_off_unless_asked_for(tmp_path):
    """Without --parse_page, / is the REST API's 404 (checked on the app: no server)."""
    from tetra_tf.serving.rest import RestApp

    app = RestApp(predictor=types.SimpleNamespace(manager=None))  # (/ needs no model)
    answers = []
    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/"},
                        lambda status, headers: answers.append(status)))
    assert answers == ["404 Not Found"] and b"no such endpoint" in body


def _browser(download_dir: str):
    """Headless Chromium (Debian's) through its chromedriver; nothing fetched from the
    network (selenium-manager is not asked: the driver's path is given)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not (CHROMIUM and os.path.exists(CHROMEDRIVER)):
        message = "needs chromium and chromium-driver (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     "--disable-dev-shm-usage", f"--user-data-dir={download_dir}",
                     "--window-size=1280,1400"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser():
    with tempfile.TemporaryDirectory(prefix="tetra-chromium-") as profile:
        driver = _browser(profile)
        try:
            yield driver
        finally:
            driver.quit()


def _submit(browser, port: int, text: str) -> None:
    """Opens the page, types text, clicks Parse, and waits for the page's answer."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"http://127.0.0.1:{port}/")
    WebDriverWait(browser, 30).until(
        lambda driver: driver.find_elements(By.CSS_SELECTOR, "#model option"))
    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    browser.find_element(By.ID, "parse").click()
    WebDriverWait(browser, 120).until(lambda driver: driver.find_element(
        By.ID, "status").text not in ("", "Parsing…"))
    assert not expected_conditions.alert_is_present()(browser), "an alert ran"


def _rest(port: int, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/models/{MODEL_NAME}:predict",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _not_blank(png: bytes) -> bool:
    """A screenshot with more than a few colours and no colour covering nearly all of it."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    most = max(count for count, _ in colours)
    return len(colours) > 8 and most < 0.995 * image.width * image.height


def test_the_page_draws_each_sentence_as_a_client_gets_it(browser, page_server, tmp_path):
    """Typed text → a drawn tree per sentence: the words as typed (markup stays text, no
    script from the input runs), each tree's labels in order, each constituent's
    probability; the trees are those the REST API gives any client."""
    from selenium.webdriver.common.by import By

    _submit(browser, page_server, TYPED)
    assert browser.find_element(By.ID, "error").is_displayed() is False
    items = browser.find_elements(By.CSS_SELECTOR, "#sentences li.sentence")
    expected = text_lib.tokenize_document(TYPED)
    assert len(items) == len(expected) == 2
    status, answer = _rest(page_server, {"signature_name": "parse_text",
                                         "instances": [TYPED]})
    assert status == 200
    trees = answer["predictions"][0]["tree"]
    for item, sentence, tree in zip(items, expected, trees):
        svg = item.find_element(By.CSS_SELECTOR, ".drawing > svg")
        texts = [(node.get_attribute("class"), node.get_attribute("textContent"))
                 for node in svg.find_elements(By.CSS_SELECTOR, "text")]
        written = [TYPED[token.start:token.end] for token in sentence.tokens]
        assert [text for kind, text in texts if kind == drawing.WORD] == written
        assert item.find_element(By.CSS_SELECTOR, ".bracketed").text == tree
        parsed = treebank.parse_tree(tree)
        labels = [node.label() for node in parsed.subtrees()]
        assert [text for kind, text in texts if kind in (drawing.LABEL, drawing.POS)] == labels
        constituents = len(labels) - 1 - len(parsed.leaves())  # but the root and the POS
        probabilities = [text for kind, text in texts if kind == drawing.PROBABILITY]
        assert len(probabilities) == constituents
        assert all(0.0 <= float(p) <= 1.0 for p in probabilities)
    second = items[1].find_element(By.CSS_SELECTOR, ".text").text
    assert "<script>alert(1)</script>" in second and "<b>bold</b>" in second
    assert "&amp;" in second
    assert browser.execute_script(
        "return [document.scripts.length, document.querySelectorAll("
        "'#sentences script, #sentences b').length]") == [1, 0]
    screenshot = browser.get_screenshot_as_png()
    assert _not_blank(screenshot)
    tree_png = items[0].find_element(By.CSS_SELECTOR, ".drawing > svg").screenshot_as_png
    assert _not_blank(tree_png)
    keep = os.environ.get("TETRA_PAGE_SCREENSHOTS")  # a folder to keep them in
    for name, png in (("page.png", screenshot), ("tree.png", tree_png)):
        (tmp_path / name).write_bytes(png)
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(tmp_path / name, os.path.join(keep, name))


def test_the_page_shows_a_refusals_reason(browser, page_server):
    """A sentence the server refuses: its reason on the page, no tree, never a blank
    page."""
    from selenium.webdriver.common.by import By

    words = " ".join(["word"] * (MAX_WORDS + 3))
    _submit(browser, page_server, f"Short one. {words}.")
    error = browser.find_element(By.ID, "error")
    assert error.is_displayed()
    status, answer = _rest(page_server, {"signature_name": "parse_text",
                                         "instances": [f"Short one. {words}."]})
    assert status == 400 and "too_many_words" in answer["error"]
    assert error.text == answer["error"]
    assert browser.find_elements(By.CSS_SELECTOR, "#sentences li") == []
    assert browser.find_element(By.ID, "status").text == "Refused."


def test_the_page_shows_the_k_best_trees_on_request(browser, page_server):
    from selenium.webdriver.common.by import By

    browser.get(f"http://127.0.0.1:{page_server}/")
    browser.find_element(By.ID, "k-best").click()
    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys("Dogs bark.")
    browser.find_element(By.ID, "parse").click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 120).until(lambda driver: driver.find_element(
        By.ID, "status").text not in ("", "Parsing…"))
    best = [item.text for item in browser.find_elements(By.CSS_SELECTOR, ".k-best li")]
    status, answer = _rest(page_server, {"signature_name": "parse_k_best",
                                         "instances": ["Dogs bark ."]})
    assert status == 200
    row = answer["predictions"][0]
    assert best == [f"{score:.4f} {tree}" for tree, score in zip(
        row["k_best_trees"][:row["num_k_best"]], row["k_best_scores"])]
    assert len(best) >= 1
