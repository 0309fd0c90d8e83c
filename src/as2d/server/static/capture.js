// The microphone's samples as PCM16 at the Realtime API's 24 kHz, in 100 ms chunks, from an
// AudioWorklet (the audio thread: nothing is lost while the page is busy). Where the browser
// already runs the AudioContext at 24 kHz the samples pass through; else a windowed-sinc
// low-pass resamples them here (a plain pick of samples would alias the higher band).

const HALF = 16; // filter taps on each side of an output sample

class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { rate, chunkS } = options.processorOptions;
    this.step = sampleRate / rate; // input samples per output sample
    this.cutoff = Math.min(1, rate / sampleRate) * 0.92; // of the input's Nyquist band
    this.size = Math.round(rate * chunkS); // samples per message
    this.chunk = new Int16Array(this.size);
    this.filled = 0;
    this.pending = new Float32Array(0); // input not yet past the filter's reach
    this.t = HALF; // the next output sample's position in `pending`
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    if (this.step === 1) {
      for (const v of channel) this.emit(v);
    } else {
      this.resample(channel);
    }
    return true;
  }

  resample(block) {
    const xs = new Float32Array(this.pending.length + block.length);
    xs.set(this.pending);
    xs.set(block, this.pending.length);
    while (this.t + HALF < xs.length) {
      const c = Math.floor(this.t);
      const frac = this.t - c;
      let acc = 0;
      let norm = 0;
      for (let k = 1 - HALF; k <= HALF; k++) {
        const w = this.kernel(k - frac);
        acc += xs[c + k] * w;
        norm += w;
      }
      this.emit(acc / norm);
      this.t += this.step;
    }
    const keep = Math.floor(this.t) - HALF;
    this.pending = xs.slice(keep);
    this.t -= keep;
  }

  kernel(d) {
    const x = Math.PI * this.cutoff * d;
    const sinc = d === 0 ? 1 : Math.sin(x) / x;
    const hann = 0.5 + 0.5 * Math.cos((Math.PI * d) / HALF);
    return sinc * hann;
  }

  emit(v) {
    const s = Math.max(-1, Math.min(1, v));
    this.chunk[this.filled++] = Math.round(s < 0 ? s * 32768 : s * 32767);
    if (this.filled === this.size) {
      this.port.postMessage(this.chunk.buffer, [this.chunk.buffer]); // detaches this.chunk
      this.chunk = new Int16Array(this.size);
      this.filled = 0;
    }
  }
}

registerProcessor("pcm-capture", PcmCapture);
