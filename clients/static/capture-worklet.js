// Microphone capture: mixes the input to mono, low-pass filters and resamples it
// from the AudioContext's rate to 16 kHz (windowed-sinc FIR, table of fractional
// phases), and posts 20 ms frames of PCM16 to the main thread as ArrayBuffers
// (transferred, not copied), together with the frame's RMS level for the meter.
//
// processorOptions: { targetRate: 16000, frameMs: 20 }

const PHASES = 256; // fractional positions the filter is tabulated at
const ZERO_CROSSINGS = 16; // half-width of the filter, in output-rate samples (1 ms at 16 kHz)

class SincResampler {
  constructor(inRate, outRate) {
    this.step = inRate / outRate; // input samples per output sample
    const ratio = Math.min(1, outRate / inRate);
    const cutoff = 0.45 * ratio; // cycles per input sample (just under the new Nyquist)
    this.half = Math.ceil(ZERO_CROSSINGS / ratio); // taps each side, in input samples
    const taps = 2 * this.half;
    this.table = new Float32Array((PHASES + 1) * taps);
    for (let p = 0; p <= PHASES; p++) {
      const frac = p / PHASES;
      let sum = 0;
      for (let j = 0; j < taps; j++) {
        const x = j - this.half + 1 - frac; // distance from the output position
        const arg = 2 * cutoff * x;
        const sinc = x === 0 ? 1 : Math.sin(Math.PI * arg) / (Math.PI * arg);
        const w = x / this.half; // Blackman window over [-1, 1]
        const win = Math.abs(w) >= 1 ? 0 : 0.42 + 0.5 * Math.cos(Math.PI * w) + 0.08 * Math.cos(2 * Math.PI * w);
        const h = 2 * cutoff * sinc * win;
        this.table[p * taps + j] = h;
        sum += h;
      }
      for (let j = 0; j < taps; j++) this.table[p * taps + j] /= sum; // unity gain at DC
    }
    this.taps = taps;
    // input history; t is the next output's position in it
    this.buf = new Float32Array(taps + 4096);
    this.len = this.half - 1; // leading zeros so the first output has full history
    this.t = this.half - 1;
  }

  // Feed input samples; calls emit(sample) for every output sample now computable.
  push(input, emit) {
    if (this.len + input.length > this.buf.length) {
      const bigger = new Float32Array(2 * (this.len + input.length));
      bigger.set(this.buf.subarray(0, this.len));
      this.buf = bigger;
    }
    this.buf.set(input, this.len);
    this.len += input.length;
    const { buf, table, taps, half, step } = this;
    let t = this.t;
    while (Math.floor(t) + half < this.len) {
      const i0 = Math.floor(t);
      let p = Math.round((t - i0) * PHASES);
      const base = i0 - half + 1;
      const row = p * taps;
      let acc = 0;
      for (let j = 0; j < taps; j++) acc += buf[base + j] * table[row + j];
      emit(acc);
      t += step;
    }
    // drop input no future output needs
    const keepFrom = Math.max(0, Math.floor(t) - half + 1);
    if (keepFrom > 0) {
      buf.copyWithin(0, keepFrom, this.len);
      this.len -= keepFrom;
      t -= keepFrom;
    }
    this.t = t;
  }
}

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.targetRate = opts.targetRate || 16000;
    this.frameSamples = Math.round((this.targetRate * (opts.frameMs || 20)) / 1000);
    this.resampler = new SincResampler(sampleRate, this.targetRate);
    this.frame = new Int16Array(this.frameSamples);
    this.fill = 0;
    this.energy = 0;
    this.mono = new Float32Array(128);
    this.emit = (x) => {
      const s = Math.max(-1, Math.min(1, x));
      this.energy += s * s;
      this.frame[this.fill++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.fill === this.frameSamples) {
        const rms = Math.sqrt(this.energy / this.frameSamples);
        const out = this.frame;
        this.port.postMessage({ pcm: out.buffer, rms }, [out.buffer]);
        this.frame = new Int16Array(this.frameSamples);
        this.fill = 0;
        this.energy = 0;
      }
    };
  }

  process(inputs) {
    const channels = inputs[0];
    if (channels && channels.length > 0) {
      const n = channels[0].length;
      if (this.mono.length !== n) this.mono = new Float32Array(n);
      const mono = this.mono;
      if (channels.length === 1) {
        mono.set(channels[0]);
      } else {
        mono.fill(0);
        for (const ch of channels) for (let i = 0; i < n; i++) mono[i] += ch[i];
        for (let i = 0; i < n; i++) mono[i] /= channels.length;
      }
      this.resampler.push(mono, this.emit);
    }
    return true;
  }
}

registerProcessor("capture-processor", CaptureProcessor);
