// The parse page's script (tetra_tf/serving/page.py): asks the REST API as any client does,
// then has the server draw each tree. Every string from the user or the server is written
// as text (textContent), never as markup.
"use strict";

const $ = (id) => document.getElementById(id);

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// POSTs a JSON body; returns [ok, answer JSON] (a body that is not JSON is an error).
async function post(path, body) {
  let response;
  try {
    response = await fetch(path, {method: "POST", body: JSON.stringify(body),
                                  headers: {"Content-Type": "application/json"}});
  } catch (e) {
    return [false, {error: `the server cannot be reached (${e.message})`}];
  }
  let answer;
  try {
    answer = await response.json();
  } catch (e) {
    answer = {error: `HTTP ${response.status}: the answer is not JSON`};
  }
  return [response.ok, answer];
}

// TF Serving's REST predict, as any client calls it.
function predict(model, signature, instances) {
  return post(`/v1/models/${encodeURIComponent(model)}:predict`,
              {signature_name: signature, instances: instances});
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = false;
}

// parse_text's answer for one text → its sentences (offsets in code points, as the server
// counts them).
function sentencesOf(prediction, text) {
  const characters = Array.from(text);
  const sentences = [];
  for (let i = 0; i < prediction.num_sentences; i++) {
    const count = prediction.num_words[i];
    const starts = prediction.word_starts[i].slice(0, count);
    const ends = prediction.word_ends[i].slice(0, count);
    sentences.push({
      start: prediction.sentence_starts[i],
      end: prediction.sentence_ends[i],
      text: characters.slice(prediction.sentence_starts[i], prediction.sentence_ends[i])
        .join("").trim(),
      words: prediction.words[i].slice(0, count),
      written: starts.map((start, j) => characters.slice(start, ends[j]).join("")),
      posTags: prediction.pos_tags[i].slice(0, count),
      tree: prediction.tree[i],
      score: prediction.score[i],
      probabilities: null,
      treeProbability: null,
      kBest: null,
    });
  }
  return sentences;
}

// An SVG document from the server, as a node of this page (parsed as XML: no script runs).
function svgNode(svg) {
  const parsed = new DOMParser().parseFromString(svg, "image/svg+xml");
  if (parsed.getElementsByTagName("parsererror").length) {
    return element("p", "refusal", "the drawing could not be read");
  }
  return document.importNode(parsed.documentElement, true);
}

function render(sentences, svgs) {
  const list = $("sentences");
  sentences.forEach((sentence, i) => {
    const item = element("li", "sentence");
    item.dataset.sentence = String(i + 1);
    item.appendChild(element("p", "text", sentence.text));
    let meta = `words ${sentence.words.length} · characters ${sentence.start}–${sentence.end}` +
               ` · score ${sentence.score.toFixed(4)}`;
    if (sentence.treeProbability !== null) {
      meta += ` · tree probability ${sentence.treeProbability.toFixed(4)}`;
    }
    item.appendChild(element("p", "meta", meta));
    const drawing = element("div", "drawing");
    drawing.appendChild(svgNode(svgs[i]));
    item.appendChild(drawing);
    item.appendChild(element("p", "bracketed", sentence.tree));
    if (sentence.kBest) {
      const best = element("ol", "k-best");
      sentence.kBest.forEach(([tree, score]) =>
        best.appendChild(element("li", null, `${score.toFixed(4)} ${tree}`)));
      const details = element("details");
      details.open = true;
      details.appendChild(element("summary", null, `The ${sentence.kBest.length} best trees`));
      details.appendChild(best);
      item.appendChild(details);
    }
    list.appendChild(item);
  });
}

async function parse(event) {
  event.preventDefault();
  const text = $("text").value;
  const model = $("model").value;
  $("error").hidden = true;
  $("sentences").replaceChildren();
  $("status").textContent = "Parsing…";
  const button = $("parse");
  button.disabled = true;
  try {
    const [ok, answer] = await predict(model, "parse_text", [text]);
    if (!ok) {
      showError(answer.error || "the server refused the text");
      $("status").textContent = "Refused.";
      return;
    }
    const sentences = sentencesOf(answer.predictions[0], text);
    if (!sentences.length) {
      $("status").textContent = "No sentences in the text.";
      return;
    }
    const joined = sentences.map((sentence) => sentence.words.join(" "));
    const notes = [];
    if ($("marginals").checked) {
      const [ok, marginals] = await predict(model, "parse_marginals", joined);
      if (ok) {
        marginals.predictions.forEach((row, i) => {
          if (row.tree === sentences[i].tree) {  // (the same tree, or no shades)
            sentences[i].probabilities = row.constituent_marginals.slice(0, row.num_constituents);
            sentences[i].treeProbability = row.tree_probability;
          }
        });
      } else {
        notes.push(`Probabilities refused: ${marginals.error}`);
      }
    }
    if ($("k-best").checked) {
      const [ok, best] = await predict(model, "parse_k_best", joined);
      if (ok) {
        best.predictions.forEach((row, i) => {
          sentences[i].kBest = row.k_best_trees.slice(0, row.num_k_best)
            .map((tree, j) => [tree, row.k_best_scores[j]]);
        });
      } else {
        notes.push(`Best trees refused: ${best.error}`);
      }
    }
    const [drawn, drawings] = await post("/page/draw", {
      trees: sentences.map((sentence) => sentence.tree),
      words: sentences.map((sentence) => sentence.written),
      probabilities: sentences.map((sentence) => sentence.probabilities),
    });
    if (!drawn) {
      showError(`The trees could not be drawn: ${drawings.error}`);
      $("status").textContent = "";
      return;
    }
    render(sentences, drawings.svgs);
    if (notes.length) showError(notes.join("\n"));
    $("status").textContent = `${sentences.length} sentence${sentences.length === 1 ? "" : "s"}.`;
  } finally {
    button.disabled = false;
  }
}

function start() {
  let models = [];
  try {
    models = JSON.parse(document.body.dataset.models || "[]");
  } catch (e) {
    models = [];
  }
  const select = $("model");
  models.forEach((name) => select.appendChild(element("option", null, name)));
  if (!models.length) showError("The server serves no model yet.");
  $("parse-form").addEventListener("submit", parse);
}

document.addEventListener("DOMContentLoaded", start);
