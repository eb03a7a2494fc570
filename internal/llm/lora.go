package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// vLLM serves LoRA adapters loaded at run time (--enable-lora and
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True) under the names they were loaded
// with; these calls load, unload and list them on one server. A server
// forgets every such adapter when it restarts.

// adminTimeout bounds one load, unload or list: a load reads the adapter
// from storage, which can take a while for a large one.
const adminTimeout = 2 * time.Minute

// ServedModel is one entry of GET /v1/models: a base model, or an adapter
// with its base model as Parent and where it was loaded from as Root.
type ServedModel struct {
	ID     string `json:"id"`
	Root   string `json:"root,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// Models lists what the server serves.
func (c *Client) Models(ctx context.Context) ([]ServedModel, error) {
	var out struct {
		Data []ServedModel `json:"data"`
	}
	data, err := c.admin(ctx, http.MethodGet, "/models", nil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("llm: decode /models: %w", err)
	}
	return out.Data, nil
}

// LoadLoRA asks the server to load the adapter at path under name. A
// server that has the name loaded already answers 400; that is reported
// as ErrLoRALoaded, so that concurrent loads of one name agree.
func (c *Client) LoadLoRA(ctx context.Context, name, path string) error {
	_, err := c.admin(ctx, http.MethodPost, "/load_lora_adapter", map[string]string{"lora_name": name, "lora_path": path})
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusBadRequest && strings.Contains(strings.ToLower(se.Body), "already been loaded") {
		return fmt.Errorf("%w: %s", ErrLoRALoaded, name)
	}
	return err
}

// UnloadLoRA asks the server to drop the adapter loaded under name. A
// server that holds no adapter of that name answers 404 "cannot be found";
// that is reported as ErrLoRANotLoaded.
func (c *Client) UnloadLoRA(ctx context.Context, name string) error {
	_, err := c.admin(ctx, http.MethodPost, "/unload_lora_adapter", map[string]string{"lora_name": name})
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound && strings.Contains(strings.ToLower(se.Body), "cannot be found") {
		return fmt.Errorf("%w: %s", ErrLoRANotLoaded, name)
	}
	return err
}

// ErrLoRALoaded says the server has an adapter of that name loaded
// already.
var ErrLoRALoaded = errors.New("llm: the server has the adapter loaded already")

// ErrLoRANotLoaded says the server holds no adapter of that name.
var ErrLoRANotLoaded = errors.New("llm: the server holds no adapter of that name")

// ModelMissing reports whether the server refused a request because it
// serves no model of the requested name: vLLM answers 404 "The model `x`
// does not exist." — for an adapter, one it never loaded or forgot when
// it restarted.
func ModelMissing(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound && strings.Contains(strings.ToLower(se.Body), "does not exist")
}

func (c *Client) admin(ctx context.Context, method, path string, body any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.url, "/chat/completions")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, &networkError{err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, &networkError{err}
	}
	if resp.StatusCode/100 != 2 {
		return nil, &StatusError{Code: resp.StatusCode, Body: truncate(string(data), 500)}
	}
	return data, nil
}
