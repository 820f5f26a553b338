"""What is sent: the prompt dataset and output lengths (dataset), a local file or a Hugging Face set as bench.dataset (sources), prompts padded to a context length (context)."""
