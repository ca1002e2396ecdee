"""One chat turn: rewrite, plan, retrieve, render, generate; and the chat history store."""
