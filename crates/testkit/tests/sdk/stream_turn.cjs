// Streams one turn from the fake with an official SDK and prints what the SDK assembled, in
// wire-neutral JSON: {text, reasoning, signature, calls: [{id, name, arguments}], usage, stop}.
// Usage: node stream_turn.cjs WIRE BASE_URL   (SDK_ROOT = the node_modules parent directory)
'use strict';
const path = require('node:path');
const { createRequire } = require('node:module');

const [wire, base] = process.argv.slice(2);
const sdk = createRequire(path.join(process.env.SDK_ROOT, 'package.json'));
const schema = { type: 'object', properties: { command: {} } };
const key = 'sk-sdk-test';

async function responses() {
  const OpenAI = sdk('openai');
  const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0 });
  const stream = client.responses.stream({
    model: 'gpt-test', input: 'go', store: false, include: ['reasoning.encrypted_content'],
    tools: [{ type: 'function', name: 'shell', parameters: schema, strict: false }],
  });
  let streamedText = '';
  stream.on('response.output_text.delta', (e) => { streamedText += e.delta; });
  const final = await stream.finalResponse();
  if (final.status === 'failed') {
    throw new Error(`response.failed: ${final.error.code}: ${final.error.message}`);
  }
  const out = { text: final.output_text, reasoning: '', signature: null, calls: [], stop: final.status };
  if (streamedText !== final.output_text) throw new Error('deltas and output_text differ');
  for (const item of final.output) {
    if (item.type === 'reasoning') {
      out.reasoning = item.summary.map((s) => s.text).join('');
      out.signature = item.encrypted_content;
    } else if (item.type === 'function_call') {
      out.calls.push({ id: item.call_id, name: item.name, arguments: JSON.parse(item.arguments) });
    }
  }
  const u = final.usage;
  out.usage = [u.input_tokens, u.input_tokens_details.cached_tokens, u.output_tokens,
    u.output_tokens_details.reasoning_tokens];
  return out;
}

async function chat() {
  const OpenAI = sdk('openai');
  const client = new OpenAI({ apiKey: key, baseURL: base, maxRetries: 0 });
  const stream = client.chat.completions.stream({
    model: 'gpt-test', messages: [{ role: 'user', content: 'go' }],
    stream_options: { include_usage: true },
    tools: [{ type: 'function', function: { name: 'shell', parameters: schema } }],
  });
  let reasoning = '';
  stream.on('chunk', (chunk) => {
    const delta = chunk.choices[0]?.delta;
    if (delta && typeof delta.reasoning_content === 'string') reasoning += delta.reasoning_content;
  });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  const u = final.usage;
  return {
    text: choice.message.content, reasoning, signature: null, stop: choice.finish_reason,
    calls: (choice.message.tool_calls || []).map((c) => ({
      id: c.id, name: c.function.name, arguments: JSON.parse(c.function.arguments),
    })),
    usage: [u.prompt_tokens, u.prompt_tokens_details.cached_tokens, u.completion_tokens,
      u.completion_tokens_details.reasoning_tokens],
  };
}

async function anthropic() {
  const Anthropic = sdk('@anthropic-ai/sdk');
  const client = new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0 });
  const stream = client.messages.stream({
    model: 'claude-test', max_tokens: 1000, messages: [{ role: 'user', content: 'go' }],
    thinking: { type: 'enabled', budget_tokens: 1024 },
    tools: [{ name: 'shell', input_schema: schema }],
  });
  const final = await stream.finalMessage();
  const out = { text: '', reasoning: '', signature: null, calls: [], stop: final.stop_reason };
  for (const block of final.content) {
    if (block.type === 'text') out.text += block.text;
    if (block.type === 'thinking') { out.reasoning += block.thinking; out.signature = block.signature; }
    if (block.type === 'tool_use') out.calls.push({ id: block.id, name: block.name, arguments: block.input });
  }
  const u = final.usage;
  out.usage = [u.input_tokens + u.cache_read_input_tokens, u.cache_read_input_tokens, u.output_tokens, 0];
  return out;
}

async function gemini() {
  const { GoogleGenAI } = sdk('@google/genai');
  const ai = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: base } });
  const stream = await ai.models.generateContentStream({
    model: 'gemini-test', contents: 'go',
    config: { tools: [{ functionDeclarations: [{ name: 'shell', parametersJsonSchema: schema }] }] },
  });
  const out = { text: '', reasoning: '', signature: null, calls: [], stop: null, usage: null };
  for await (const chunk of stream) {
    const candidate = chunk.candidates[0];
    for (const part of candidate.content.parts) {
      if (part.thoughtSignature) out.signature = part.thoughtSignature;
      if (part.functionCall) {
        out.calls.push({ id: part.functionCall.id ?? null, name: part.functionCall.name, arguments: part.functionCall.args });
      } else if (part.thought) out.reasoning += part.text;
      else if (typeof part.text === 'string') out.text += part.text;
    }
    if (candidate.finishReason) out.stop = candidate.finishReason;
    const u = chunk.usageMetadata;
    if (u) {
      out.usage = [u.promptTokenCount, u.cachedContentTokenCount ?? 0,
        (u.candidatesTokenCount ?? 0) + (u.thoughtsTokenCount ?? 0), u.thoughtsTokenCount ?? 0];
    }
  }
  return out;
}

const runners = { 'openai-responses': responses, 'openai-chat': chat, anthropic, gemini };
runners[wire]().then(
  (out) => { process.stdout.write(JSON.stringify(out) + '\n'); },
  (err) => { process.stderr.write(`${err && err.stack || err}\n`); process.exit(1); },
);
