"""What is sent: the prompt dataset and output lengths (dataset), prompts padded to a context length (context)."""
