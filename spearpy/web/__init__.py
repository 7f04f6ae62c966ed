"""What every spearpy HTTP surface (`spearpy serve`, `spearpy mcp serve
--http`) shares, below both: who may call (`guard`), how a refusal reads
(`problems`), and how many connections it holds and for how long
(`connections`)."""
