// Browser microphone demo for voice_pipeline, speaking WebSocket protocol v1
// (docs/protocol.md).
//
// Audio in:  getUserMedia (echo cancellation, noise suppression, AGC on) ->
//            capture-worklet.js (mono, resampled to 16 kHz, 20 ms PCM16 frames)
//            -> binary WebSocket frames.
// Audio out: `assistant.audio` header + binary PCM16 frame -> playback-worklet.js
//            (jitter buffer; emptied at once on `audio.clear`). Reply audio is
//            asked for at the AudioContext's own rate (`output_sample_rate` =
//            ctx.sampleRate, usually 48000 or 44100; clamped to the protocol's
//            8-48 kHz, the worklet then resamples), so the server does the one
//            resampling, in high quality, and the played-sample count the worklet
//            reports is exact. The count goes to the server as `playback`
//            {played} every ~100 ms while it changes, and at once (with
//            `cleared`: the turn id) right after an `audio.clear` was carried out.
//
// URL parameters: `?ws=ws://host:port/ws` talks to another server; `?aec=0`,
// `?ns=0`, `?agc=0` turn a microphone processing step off (diagnosis only).
// `?token=T` (a server started with --token): passed on to /ws as `?token=T`
// (a browser cannot set headers on a WebSocket), then removed from the address bar.
// For tests and the curious, live counters are on `window.demo`.

import { fmtMs, normalizeBudgets, renderWaterfall, TOTAL } from "./waterfall.js";

// The page's `?token=`, kept in memory only: the address bar (and history) lose it.
function takeToken() {
  const params = new URLSearchParams(location.search);
  const token = params.get("token");
  if (token !== null) {
    params.delete("token");
    const query = params.toString();
    history.replaceState(null, "", `${location.pathname}${query ? `?${query}` : ""}${location.hash}`);
  }
  return token;
}

const TOKEN = takeToken();
const INPUT_RATE_HZ = 16000;
const FRAME_MS = 20;
const PLAYBACK_REPORT_MS = 100;
const PREBUFFER_MS = 60;

const CLOSE_REASONS = {
  1000: "closed",
  1001: "server shutting down",
  1006: "connection lost",
  1008: "not allowed (policy)",
  1009: "message too big",
  1011: "server error",
  1013: "server busy, try again later",
};

/** Live counters, read by tests (tests/test_browser.py). */
const demo = {
  state: "idle", // idle | starting | connecting | live | stopping | closed | failed
  sessionId: null,
  outputSampleRate: null,
  framesSent: 0,
  audioFramesReceived: 0,
  samplesReceived: 0,
  samplesPlayed: 0,
  playbackReportsSent: 0,
  clears: 0,
  turnsCompleted: 0,
  waterfallsDrawn: 0,
  lastFinal: "",
  lastReply: "",
  completed: [], // turn.latency records, in arrival order
  errors: [], // { where, message }: server `error`s, failed turns, closes, mic problems
};
window.demo = demo;

const $ = (id) => document.getElementById(id);
const ui = {
  start: $("start"),
  interrupt: $("interrupt"),
  conn: $("conn"),
  connText: $("conn-text"),
  meter: $("meter-fill"),
  session: $("session"),
  turns: $("turns"),
  empty: $("empty"),
  errors: $("errors"),
  errorList: $("error-list"),
  stats: $("stats"),
  summary: $("summary"),
};

let session = null; // the live Session, if any

/**
 * Echo cancellation, noise suppression and automatic gain control are on; for
 * diagnosis, `?aec=0`, `?ns=0`, `?agc=0` in the page's URL turn one off (with
 * synthetic test speech, Chromium's noise suppression and AGC alone make
 * Whisper tiny.en mishear a word now and then).
 */
function micConstraints(params) {
  const on = (name) => params.get(name) !== "0";
  return {
    echoCancellation: on("aec"),
    noiseSuppression: on("ns"),
    autoGainControl: on("agc"),
    channelCount: 1,
  };
}

// ------------------------------------------------------------------ UI helpers

function setState(state, detail = "") {
  demo.state = state;
  ui.conn.dataset.state = state;
  const labels = {
    idle: "not connected",
    starting: "opening microphone…",
    connecting: "connecting…",
    live: "live — speak",
    stopping: "stopping…",
    closed: "disconnected",
    failed: "failed",
  };
  ui.connText.textContent = detail ? `${labels[state]} · ${detail}` : labels[state];
  const busy = state === "starting" || state === "connecting" || state === "stopping";
  ui.start.disabled = busy;
  ui.start.textContent = state === "live" || busy ? "Stop" : "Start";
  ui.start.classList.toggle("is-live", state === "live");
  ui.interrupt.disabled = state !== "live";
}

function showError(where, message) {
  demo.errors.push({ where, message });
  ui.errors.hidden = false;
  const li = document.createElement("li");
  const time = new Date().toLocaleTimeString();
  li.innerHTML = `<span class="err-time"></span><span class="err-code"></span><span class="err-msg"></span>`;
  li.children[0].textContent = time;
  li.children[1].textContent = where;
  li.children[2].textContent = message;
  ui.errorList.prepend(li);
  while (ui.errorList.children.length > 20) ui.errorList.lastChild.remove();
}

function updateStats() {
  const s = session;
  const rate = demo.outputSampleRate || 1;
  const buffered = s ? s.bufferedSamples : 0;
  ui.stats.textContent =
    `mic frames sent ${demo.framesSent} · reply audio received ${(demo.samplesReceived / rate).toFixed(1)} s` +
    ` · played ${(demo.samplesPlayed / rate).toFixed(1)} s · buffered ${Math.round((1000 * buffered) / rate)} ms`;
}

// ------------------------------------------------------------------ turns

/** One turn card: the user's words, the assistant's reply, the waterfall. */
class TurnView {
  constructor(turnId) {
    this.turnId = turnId;
    this.reply = "";
    this.root = document.createElement("article");
    this.root.className = "turn";
    this.root.dataset.turnId = String(turnId);
    this.root.innerHTML = `
      <header class="turn-head">
        <span class="turn-no"></span>
        <span class="tags"></span>
        <span class="v2v" hidden><span class="v2v-ms"></span><span class="v2v-label">voice to voice</span></span>
      </header>
      <div class="turn-body">
        <div class="dialog">
          <div class="msg user">
            <div class="who">You</div>
            <p class="text listening"><span class="committed"></span><span class="tentative"></span></p>
          </div>
          <div class="msg tools" hidden>
            <div class="who">Tools</div>
            <ul class="calls"></ul>
          </div>
          <div class="msg assistant" hidden>
            <div class="who">Assistant <span class="speaking" hidden title="playing">●</span></div>
            <p class="text"></p>
            <p class="work"></p>
          </div>
        </div>
        <div class="latency">
          <div class="wf-wrap"><div class="wf-pending">waiting for the turn's latency record…</div></div>
          <div class="wf-legend" hidden>
            <span><i class="sw sw-bar"></i>measured</span>
            <span><i class="sw sw-budget"></i>stage budget</span>
            <span><i class="sw sw-over"></i>over budget</span>
            <span><i class="sw sw-limit"></i>voice-to-voice budget</span>
          </div>
        </div>
      </div>`;
    this.q = (sel) => this.root.querySelector(sel);
    this.q(".turn-no").textContent = `Turn ${turnId}`;
    this.q(".committed").textContent = "…";
  }

  partial(committed, tentative) {
    if (this.final) return;
    this.q(".committed").textContent = committed ? `${committed} ` : "";
    this.q(".tentative").textContent = tentative || (committed ? "" : "…");
  }

  finalText(text) {
    this.final = true;
    const p = this.q(".user .text");
    p.classList.remove("listening");
    this.q(".committed").textContent = text || "(no words)";
    this.q(".tentative").textContent = "";
    p.classList.add("final");
    p.classList.toggle("no-words", !text);
  }

  /** The user went on speaking before hearing the reply: listening again, the reply void. */
  continued() {
    this.final = false;
    this.reply = "";
    const p = this.q(".user .text");
    p.classList.remove("final", "no-words");
    p.classList.add("listening");
    this.q(".tentative").textContent = " …";
    this.q(".assistant").hidden = true;
    this.q(".assistant .text").textContent = "";
    if (this.stateTag) {
      this.stateTag.remove();
      this.stateTag = null;
    }
    if (!this.continuedTag) this.continuedTag = this.tag("continued", "muted");
  }

  replyDelta(delta) {
    this.reply += delta;
    this.q(".assistant").hidden = false;
    this.q(".assistant .text").textContent = this.reply;
  }

  /** A server-side tool call (tool.call): its name and arguments, its result to come. */
  toolCall(callId, name, args) {
    this.q(".tools").hidden = false;
    const li = document.createElement("li");
    li.className = "call running";
    li.dataset.callId = callId;
    const sig = document.createElement("code");
    sig.textContent = `${name}(${args})`;
    const out = document.createElement("span");
    out.className = "result";
    out.textContent = "running…";
    li.append(sig, out);
    this.q(".calls").appendChild(li);
  }

  /** Its result (tool.result): the output the LLM is told, or why there is none. */
  toolResult(callId, name, output, error) {
    let li = [...this.root.querySelectorAll(".calls li")].find((e) => e.dataset.callId === callId);
    if (!li) {
      this.toolCall(callId, name, "");
      li = this.q(".calls li:last-child");
    }
    li.classList.remove("running");
    li.classList.toggle("failed", error != null);
    li.querySelector(".result").textContent = error != null ? `failed: ${error}` : `→ ${output}`;
  }

  tag(text, kind = "") {
    const span = document.createElement("span");
    span.className = `tag ${kind}`;
    span.textContent = text;
    this.q(".tags").appendChild(span);
    return span;
  }

  /** The reply's state after a barge-in: paused -> resumed (why) | interrupted (why). */
  replyState(text, kind) {
    if (!this.stateTag) this.stateTag = this.tag("", "");
    this.stateTag.className = `tag ${kind}`;
    this.stateTag.textContent = text;
    this.interruptedShown = kind === "warn";
  }

  speaking(on) {
    this.q(".speaking").hidden = !on;
  }

  /** The turn.latency record: heard/unheard reply, waterfall, totals. */
  complete(record, budgets) {
    if (record.user_text && !this.final) this.finalText(record.user_text);
    if (record.interruption) this.tag(words(record.interruption), "muted");
    const text = record.assistant_text || this.reply;
    if (text) {
      this.q(".assistant").hidden = false;
      const p = this.q(".assistant .text");
      p.replaceChildren();
      let cut = record.interrupted ? heardPrefixLength(text, record.heard_text || "") : text.length;
      while (cut < text.length && /\s/.test(text[cut])) cut += 1; // strike words, not the space before
      const heard = document.createElement("span");
      heard.className = "heard";
      heard.textContent = text.slice(0, cut);
      p.appendChild(heard);
      if (cut < text.length) {
        const unheard = document.createElement("span");
        unheard.className = "unheard";
        unheard.title = "generated but never heard (interrupted)";
        unheard.textContent = text.slice(cut);
        p.appendChild(unheard);
      }
      if (record.interrupted && !this.interruptedShown) this.replyState("interrupted", "warn");
    }
    const w = record.work;
    if (w) {
      const parts = [`${w.llm_tokens} tokens`, `${w.audio_synthesized_s.toFixed(1)} s audio`];
      if (record.interrupted) parts.push(`${w.audio_heard_s.toFixed(1)} s heard`);
      if (record.asr) parts.push(`ASR ${fmtMs(record.asr.decode_ms)}${record.asr.speculative ? " (speculative)" : ""}`);
      this.q(".work").textContent = parts.join(" · ");
    }
    const total = (record.stages_ms || {})[TOTAL.key];
    if (total != null) {
      const v2v = this.q(".v2v");
      v2v.hidden = false;
      this.q(".v2v-ms").textContent = fmtMs(total);
      const budget = budgets[TOTAL.key];
      v2v.classList.toggle("is-over", budget != null && total > budget);
      v2v.title = budget != null ? `budget ${fmtMs(budget)}` : "";
    }
    const wrap = this.q(".wf-wrap");
    if (Object.keys(record.stages_ms || {}).length > 0) {
      wrap.replaceChildren(renderWaterfall(record, budgets));
      this.q(".wf-legend").hidden = false;
      demo.waterfallsDrawn += 1;
    } else {
      wrap.replaceChildren();
      const none = document.createElement("div");
      none.className = "wf-pending";
      none.textContent = "no reply, no latency to show";
      wrap.appendChild(none);
    }
    this.root.classList.add("done");
  }
}

const words = (s) => String(s ?? "").replaceAll("_", " ");

/**
 * Length of the prefix of `text` covered by `heard` (the heard words in order,
 * as the server's heard-text mapping joins them). Words are matched in order,
 * ignoring case; the prefix ends right after the last heard word.
 */
export function heardPrefixLength(text, heard) {
  const lower = text.toLowerCase();
  let pos = 0;
  for (const word of heard.toLowerCase().split(/\s+/).filter(Boolean)) {
    const at = lower.indexOf(word, pos);
    if (at < 0) break;
    pos = at + word.length;
  }
  // keep trailing punctuation of the last heard word with it
  while (pos < text.length && /[.,;:!?'")\]]/.test(text[pos])) pos += 1;
  return pos;
}

class Turns {
  constructor() {
    this.views = new Map();
    this.records = [];
  }

  /** A new session numbers its turns from 1 again: earlier cards stay, as history. */
  newSession() {
    this.views.clear();
  }

  get(turnId) {
    let v = this.views.get(turnId);
    if (!v) {
      v = new TurnView(turnId);
      this.views.set(turnId, v);
      ui.empty.hidden = true;
      ui.turns.prepend(v.root); // newest first: the live turn is always in view
    }
    return v;
  }

  completed(record, budgets) {
    this.get(record.turn_id).complete(record, budgets);
    this.records.push(record);
    const totals = this.records.map((r) => (r.stages_ms || {})[TOTAL.key]).filter((v) => v != null);
    if (totals.length === 0) return;
    const sorted = [...totals].sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    const budget = budgets[TOTAL.key];
    const over = budget != null ? totals.filter((v) => v > budget).length : 0;
    ui.summary.hidden = false;
    ui.summary.innerHTML = `
      <div class="kpi"><span class="kpi-v"></span><span class="kpi-l">median voice to voice</span></div>
      <div class="kpi"><span class="kpi-v"></span><span class="kpi-l">turns</span></div>
      <div class="kpi"><span class="kpi-v"></span><span class="kpi-l">over budget</span></div>`;
    const v = ui.summary.querySelectorAll(".kpi-v");
    v[0].textContent = fmtMs(median);
    v[0].classList.toggle("is-over", budget != null && median > budget);
    v[1].textContent = String(this.records.length);
    v[2].textContent = budget != null ? `${over}/${totals.length}` : "—";
    v[2].classList.toggle("is-over", over > 0);
  }
}

const turns = new Turns();

// ------------------------------------------------------------------ session

class Session {
  constructor() {
    this.ctx = null;
    this.stream = null;
    this.ws = null;
    this.capture = null;
    this.playback = null;
    this.budgets = {};
    this.audioHeader = null; // the `assistant.audio` header awaiting its binary frame
    this.played = 0;
    this.reportedPlayed = 0;
    this.bufferedSamples = 0;
    this.speakingTurn = null;
    this.lastAudioTurn = null;
    this.timer = null;
    this.closed = false;
  }

  async open() {
    setState("starting");
    turns.newSession();
    // Created inside the click handler's task, so autoplay policies allow it.
    this.ctx = new AudioContext({ latencyHint: "interactive" });
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: micConstraints(new URLSearchParams(location.search)),
      video: false,
    });
    await Promise.all([
      this.ctx.audioWorklet.addModule("capture-worklet.js"),
      this.ctx.audioWorklet.addModule("playback-worklet.js"),
    ]);
    if (this.closed) return;
    const source = this.ctx.createMediaStreamSource(this.stream);
    this.capture = new AudioWorkletNode(this.ctx, "capture-processor", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { targetRate: INPUT_RATE_HZ, frameMs: FRAME_MS },
    });
    this.capture.port.onmessage = (e) => this.onCaptured(e.data);
    source.connect(this.capture);
    // its output is silence; connected so every browser keeps pulling the node
    this.capture.connect(this.ctx.destination);
    this.playback = new AudioWorkletNode(this.ctx, "playback-processor", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { prebufferMs: PREBUFFER_MS },
    });
    this.playback.port.onmessage = (e) => this.onPlayback(e.data);
    this.playback.connect(this.ctx.destination);
    // Without any audio output device (some headless machines) Firefox never
    // starts the context: say so instead of sitting in "starting" silently.
    const stuck = setTimeout(
      () => showError("audio", "the audio output does not start: is there a sound device?"),
      3000,
    );
    await this.ctx.resume();
    clearTimeout(stuck);
    if (this.closed) return;
    this.connect();
  }

  connect() {
    setState("connecting");
    const params = new URLSearchParams(location.search);
    let url = params.get("ws") || `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/ws`;
    if (TOKEN) url += `${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(TOKEN)}`;
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => {
      const track = this.stream.getAudioTracks()[0];
      const settings = track ? track.getSettings() : {};
      this.send({
        type: "start",
        version: 1,
        sample_rate: INPUT_RATE_HZ,
        format: "pcm16",
        output_sample_rate: this.outputRate(),
        capabilities: {
          playback_reports: true,
          echo_cancellation: settings.echoCancellation !== false,
        },
      });
    };
    ws.onmessage = (e) => {
      if (typeof e.data === "string") this.onEvent(e.data);
      else this.onAudio(e.data);
    };
    ws.onerror = () => {}; // the close event that follows says what happened
    ws.onclose = (e) => {
      const normal = e.code === 1000 && (demo.state === "stopping" || this.closed);
      const reason = e.reason || CLOSE_REASONS[e.code] || "closed";
      if (!normal) showError(`close ${e.code}`, reason);
      this.teardown();
      setState(normal ? "closed" : "failed", normal ? "" : reason);
    };
  }

  /** Reply audio rate to ask for: the context's own (the protocol allows 8-48 kHz). */
  outputRate() {
    return Math.min(48000, Math.max(8000, Math.round(this.ctx.sampleRate)));
  }

  send(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  onCaptured({ pcm, rms }) {
    const db = 20 * Math.log10(rms + 1e-6);
    ui.meter.style.width = `${Math.max(0, Math.min(100, ((db + 60) / 60) * 100))}%`;
    if (demo.state !== "live" || this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(pcm);
    demo.framesSent += 1;
  }

  onPlayback({ played, buffered, playing, cleared }) {
    this.played = played;
    this.bufferedSamples = buffered;
    demo.samplesPlayed = played;
    if (cleared != null) {
      // acknowledge audio.clear with the exact position playback stopped at
      this.send({ type: "playback", played, cleared });
      this.reportedPlayed = played;
      demo.playbackReportsSent += 1;
    }
    const turn = playing ? this.lastAudioTurn : null;
    if (turn !== this.speakingTurn) {
      if (this.speakingTurn != null) turns.get(this.speakingTurn).speaking(false);
      if (turn != null) turns.get(turn).speaking(true);
      this.speakingTurn = turn;
    }
  }

  reportPlayback() {
    if (this.played !== this.reportedPlayed && demo.state === "live") {
      this.send({ type: "playback", played: this.played });
      this.reportedPlayed = this.played;
      demo.playbackReportsSent += 1;
    }
    updateStats();
  }

  onAudio(buf) {
    const header = this.audioHeader;
    this.audioHeader = null;
    if (!header) {
      showError("protocol", `binary frame of ${buf.byteLength} bytes without an assistant.audio header`);
      return;
    }
    if (buf.byteLength !== header.samples * 2) {
      showError("protocol", `audio frame has ${buf.byteLength / 2} samples, header said ${header.samples}`);
    }
    demo.audioFramesReceived += 1;
    demo.samplesReceived += buf.byteLength >> 1;
    this.lastAudioTurn = header.turn_id;
    this.playback.port.postMessage({ type: "audio", turnId: header.turn_id, pcm: buf }, [buf]);
  }

  onEvent(text) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      showError("protocol", "server sent a text frame that is not JSON");
      return;
    }
    switch (msg.type) {
      case "ready":
        demo.sessionId = msg.session_id;
        demo.outputSampleRate = msg.output_sample_rate;
        this.budgets = normalizeBudgets(msg.budgets);
        if (msg.output_sample_rate !== this.ctx.sampleRate) {
          this.playback.port.postMessage({ type: "rate", sourceRate: msg.output_sample_rate });
        }
        ui.session.textContent =
          `session ${msg.session_id} · mic ${msg.input_sample_rate / 1000} kHz` +
          ` · reply ${msg.output_sample_rate / 1000} kHz`;
        setState("live");
        this.timer = setInterval(() => this.reportPlayback(), PLAYBACK_REPORT_MS);
        break;
      case "speech.started":
        turns.get(msg.turn_id);
        break;
      case "turn.continued":
        // the user went on before hearing the reply: it is void, the turn is open again
        turns.get(msg.turn_id).continued();
        break;
      case "transcript.partial":
        turns.get(msg.turn_id).partial(msg.committed, msg.tentative);
        break;
      case "transcript.final":
        demo.lastFinal = msg.text;
        turns.get(msg.turn_id).finalText(msg.text);
        break;
      case "assistant.text": {
        const view = turns.get(msg.turn_id);
        view.replyDelta(msg.delta);
        demo.lastReply = view.reply;
        break;
      }
      case "assistant.audio":
        this.audioHeader = msg;
        break;
      case "audio.clear":
        demo.clears += 1;
        this.playback.port.postMessage({ type: "clear", turnId: msg.turn_id });
        turns.get(msg.turn_id).replyState("paused", "muted");
        break;
      case "reply.resumed":
        turns.get(msg.turn_id).replyState(`resumed · ${words(msg.reason)}`, "muted");
        break;
      case "reply.interrupted":
        turns.get(msg.turn_id).replyState(`interrupted · ${words(msg.reason)}`, "warn");
        break;
      case "tool.call":
        turns.get(msg.turn_id).toolCall(msg.call_id, msg.name, msg.arguments);
        break;
      case "tool.result":
        turns.get(msg.turn_id).toolResult(msg.call_id, msg.name, msg.output, msg.error);
        break;
      case "budget.exceeded":
        break; // shown on the waterfall when the turn's record arrives
      case "turn.latency":
        demo.turnsCompleted += 1;
        demo.completed.push({ turn_id: msg.turn_id, ...msg.record });
        turns.completed({ turn_id: msg.turn_id, ...msg.record }, this.budgets);
        break;
      case "turn.failed":
        turns.get(msg.turn_id).tag(`${msg.stage} failed`, "bad");
        showError(`turn ${msg.turn_id}: ${msg.stage}`, `${msg.message}${msg.retryable ? " (retryable)" : ""}`);
        break;
      case "error":
        showError(msg.code || "error", msg.message || "");
        if (demo.state === "connecting") {
          // our `start` was refused: nothing will work on this connection
          this.ws.close(1000);
          this.teardown();
          setState("failed", msg.message || msg.code);
        }
        break;
      default:
        break; // newer servers may send more; ignore what we do not know
    }
  }

  interrupt() {
    this.send({ type: "interrupt" });
  }

  stop() {
    if (this.closed) return;
    setState("stopping");
    this.reportPlayback();
    this.send({ type: "stop" }); // the server closes with 1000
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      this.teardown();
      setState("closed");
    }
  }

  teardown() {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    if (this.speakingTurn != null) turns.get(this.speakingTurn).speaking(false);
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    if (this.ctx) this.ctx.close().catch(() => {});
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000);
    ui.meter.style.width = "0%";
    if (session === this) session = null;
  }
}

// ------------------------------------------------------------------ controls

ui.start.addEventListener("click", async () => {
  if (session) {
    session.stop();
    return;
  }
  const s = new Session();
  session = s;
  try {
    await s.open();
  } catch (err) {
    const message =
      err && err.name === "NotAllowedError"
        ? "microphone permission denied"
        : err && err.name === "NotFoundError"
          ? "no microphone found"
          : String((err && err.message) || err);
    showError("microphone", message);
    s.teardown();
    setState("failed", message);
  }
});

ui.interrupt.addEventListener("click", () => session && session.interrupt());

if (!window.AudioWorkletNode || !navigator.mediaDevices) {
  setState("failed", "this browser lacks AudioWorklet or getUserMedia (a secure context is needed)");
  ui.start.disabled = true;
} else {
  setState("idle");
}
updateStats();
