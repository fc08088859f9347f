"""fastane.device"""
