// Reply playback with a small jitter buffer.
//
// The main thread posts:
//   { type: "audio", turnId, pcm: ArrayBuffer (PCM16 LE mono at sourceRate) }
//   { type: "clear", turnId }   drop every queued sample of turnId now (barge-in)
//   { type: "rate", sourceRate } rate of the reply audio (default: the context's)
// and receives, every ~50 ms while something changes and at once after a clear:
//   { played, buffered, playing, cleared }
// (`cleared` is the turn id when the report is the one right after its clear)
// where `played` is the total number of source samples actually rendered to the
// output since the processor started (what the listener heard), `buffered` the
// source samples waiting.
//
// Jitter buffer: when playback starts (or restarts after running dry), output
// waits until `prebufferMs` of audio is queued, or until the first queued sample
// has waited `prebufferMs`, whichever comes first; so a short last chunk of a
// reply is never held back for good.
//
// processorOptions: { prebufferMs: 60 }

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.prebufferMs = opts.prebufferMs ?? 60;
    this.setSourceRate(sampleRate);
    this.queue = []; // { turnId, data: Float32Array }
    this.head = 0; // read position (fractional, source samples) in queue[0]
    this.buffered = 0; // source samples queued, from head
    this.played = 0; // source samples rendered since start
    this.playing = false; // false = (re)filling the jitter buffer
    this.waited = 0; // output frames spent filling with something queued
    this.sinceReport = 0;
    this.dirty = false;
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  setSourceRate(rate) {
    this.sourceRate = rate;
    this.step = rate / sampleRate; // source samples per output frame
    this.prebufferSamples = Math.round((rate * this.prebufferMs) / 1000);
    this.prebufferFrames = Math.round((sampleRate * this.prebufferMs) / 1000);
  }

  onMessage(msg) {
    switch (msg.type) {
      case "audio": {
        const pcm = new Int16Array(msg.pcm);
        const data = new Float32Array(pcm.length);
        for (let i = 0; i < pcm.length; i++) data[i] = pcm[i] / 32768;
        this.queue.push({ turnId: msg.turnId, data });
        this.buffered += data.length;
        this.dirty = true;
        break;
      }
      case "clear": {
        const keep = this.queue.filter((c) => c.turnId !== msg.turnId);
        if (keep.length !== this.queue.length) {
          if (this.queue.length > 0 && this.queue[0].turnId === msg.turnId) this.head = 0;
          this.queue = keep;
          this.buffered = this.queue.reduce((n, c) => n + c.data.length, 0) - this.head;
          if (this.queue.length === 0) this.playing = false;
        }
        this.report(msg.turnId);
        break;
      }
      case "rate":
        this.setSourceRate(msg.sourceRate);
        break;
    }
  }

  report(cleared = null) {
    this.port.postMessage({
      cleared,
      played: this.played,
      buffered: Math.max(0, Math.round(this.buffered)),
      playing: this.playing,
    });
    this.sinceReport = 0;
    this.dirty = false;
  }

  // Linear interpolation at the fractional head; equal rates (step 1) copy exactly.
  sampleAt(pos) {
    const first = this.queue[0].data;
    const i = Math.floor(pos);
    const frac = pos - i;
    const a = first[i];
    if (frac === 0) return a;
    const b = i + 1 < first.length ? first[i + 1] : this.queue.length > 1 ? this.queue[1].data[0] : a;
    return a + (b - a) * frac;
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    const n = out[0].length;
    const ch0 = out[0];
    ch0.fill(0);
    if (!this.playing && this.queue.length > 0) {
      this.waited += n;
      if (this.buffered >= this.prebufferSamples || this.waited >= this.prebufferFrames) {
        this.playing = true;
        this.waited = 0;
      }
    }
    if (this.playing) {
      let k = 0;
      while (k < n && this.queue.length > 0) {
        const chunk = this.queue[0].data;
        ch0[k++] = this.sampleAt(this.head);
        const before = Math.floor(this.head);
        this.head += this.step;
        const consumed = Math.floor(this.head) - before;
        this.played += consumed;
        this.buffered -= consumed;
        if (this.head >= chunk.length) {
          this.head -= chunk.length;
          this.queue.shift();
        }
      }
      if (this.queue.length === 0) {
        this.head = 0;
        this.buffered = 0;
        this.playing = false; // ran dry: refill the jitter buffer before going on
      }
      this.dirty = true;
    }
    for (let c = 1; c < out.length; c++) out[c].set(ch0);
    this.sinceReport += n;
    if (this.dirty && this.sinceReport >= sampleRate / 20) this.report();
    return true;
  }
}

registerProcessor("playback-processor", PlaybackProcessor);
