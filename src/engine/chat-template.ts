// The chat template lives in the capture layer (the proxy renders prompts itself in token-in mode);
// the engine renders with the same class.
export { ChatTemplate, ChatTemplateError, type RenderOptions } from '../capture/render/chat-template.js';
